//! The links of an error chain below erdma-build's own errors: a cause kept whole, and one
//! step of context. A leaf: the package backends use it without importing the errors above
//! them.

/// A cause kept whole: the error that made this one, or a reason that only exists as text.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// One link of a chain: what was being done (`reading URL`) when `source` happened. It prints
/// as its own `Caused by:` line, with `source` after it.
#[derive(Debug, thiserror::Error)]
#[error("{doing}")]
pub struct Doing {
    doing: String,
    #[source]
    source: Cause,
}

impl Doing {
    pub fn new(doing: impl Into<String>, source: impl Into<Cause>) -> Doing {
        Doing { doing: doing.into(), source: source.into() }
    }
}
