//! Errors shown on one line.

/// An error and its causes on one line, `outer: cause: cause` (reqwest's own text is "error
/// sending request": the causes say what happened). For log lines and reasons kept as text;
/// a program's `error:` output prints the causes on lines of their own.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_cause_in_order() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(super::chain(&e), "outer: inner");
    }
}
