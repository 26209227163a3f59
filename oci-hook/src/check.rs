//! A check of `doctor` (host checks, and the container `doctor --image` runs): the common
//! [`Finding`] (ok, warn or fail, with a one-line hint when not ok) and what the check saw.
//! Below both `doctor` and `trial`.
use std::ops::{Deref, DerefMut};

pub use erdma_common::check::{Finding, Status};
use serde::ser::SerializeStruct;
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Check {
    pub finding: Finding,
    /// What the check saw, for machines.
    pub details: Value,
}

/// `doctor --json` writes `hint: null` for an ok check (where `erdma-build check` leaves the
/// key out): its JSON is kept as it has always been.
impl Serialize for Check {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Check", 5)?;
        st.serialize_field("id", &self.finding.id)?;
        st.serialize_field("status", &self.finding.status)?;
        st.serialize_field("message", &self.finding.message)?;
        st.serialize_field("hint", &self.finding.hint)?;
        st.serialize_field("details", &self.details)?;
        st.end()
    }
}

impl Deref for Check {
    type Target = Finding;
    fn deref(&self) -> &Finding {
        &self.finding
    }
}

impl DerefMut for Check {
    fn deref_mut(&mut self) -> &mut Finding {
        &mut self.finding
    }
}

impl Check {
    pub(crate) fn ok(id: impl Into<String>, message: impl Into<String>, details: Value) -> Check {
        Check { finding: Finding::ok(id, message), details }
    }

    pub(crate) fn warn(
        id: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
        details: Value,
    ) -> Check {
        Check { finding: Finding::warn(id, message, hint), details }
    }

    pub(crate) fn fail(
        id: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
        details: Value,
    ) -> Check {
        Check { finding: Finding::fail(id, message, hint), details }
    }
}
