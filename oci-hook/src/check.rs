//! A finding of `doctor` (host checks, and the container `doctor --image` runs): ok, warn or
//! fail, with a one-line hint when not ok. Below both `doctor` and `trial`.
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable identifier (see the module docs).
    pub id: String,
    pub status: Status,
    pub message: String,
    /// What to do about it, one line; `None` when the check is ok.
    pub hint: Option<String>,
    /// What the check saw, for machines.
    pub details: Value,
}

impl Check {
    pub(crate) fn ok(id: impl Into<String>, message: impl Into<String>, details: Value) -> Check {
        Check { id: id.into(), status: Status::Ok, message: message.into(), hint: None, details }
    }

    pub(crate) fn warn(
        id: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
        details: Value,
    ) -> Check {
        Check {
            id: id.into(),
            status: Status::Warn,
            message: message.into(),
            hint: Some(hint.into()),
            details,
        }
    }

    pub(crate) fn fail(
        id: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
        details: Value,
    ) -> Check {
        Check {
            id: id.into(),
            status: Status::Fail,
            message: message.into(),
            hint: Some(hint.into()),
            details,
        }
    }
}
