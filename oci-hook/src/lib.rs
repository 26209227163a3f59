//! eRDMA OCI runtime wrapper and hooks (issue 4). Empty for now.
#![forbid(unsafe_code)]
