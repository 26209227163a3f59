//! One readiness finding: ok, warn or fail, with a one-line hint when not ok. `erdma-build
//! check` reports these about an image, `erdma-oci-hook doctor` about a host (with what it saw
//! beside each).
use serde::Serialize;

/// Ordered: the worst of several findings is their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable identifier, for scripts (`nccl`, `memlock`, …).
    pub id: String,
    pub status: Status,
    pub message: String,
    /// What to do about it, one line; `None` when the finding is ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Finding {
    pub fn ok(id: impl Into<String>, message: impl Into<String>) -> Finding {
        Finding { id: id.into(), status: Status::Ok, message: message.into(), hint: None }
    }

    pub fn warn(
        id: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Finding {
        Finding::new(id, Status::Warn, message, Some(hint.into()))
    }

    pub fn fail(
        id: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Finding {
        Finding::new(id, Status::Fail, message, Some(hint.into()))
    }

    pub fn new(
        id: impl Into<String>,
        status: Status,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Finding {
        Finding { id: id.into(), status, message: message.into(), hint }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_status_is_the_maximum() {
        assert_eq!([Status::Warn, Status::Ok, Status::Fail].into_iter().max(), Some(Status::Fail));
        assert!(Status::Ok < Status::Warn);
    }

    #[test]
    fn an_ok_finding_has_no_hint_in_json() {
        let ok = serde_json::to_value(Finding::ok("nccl", "NCCL 2.21.5")).unwrap();
        assert_eq!(ok, serde_json::json!({"id": "nccl", "status": "ok", "message": "NCCL 2.21.5"}));
        let warn = serde_json::to_value(Finding::warn("mtu", "MTU 9000", "set 8500")).unwrap();
        assert_eq!(warn["status"], "warn");
        assert_eq!(warn["hint"], "set 8500");
    }
}
