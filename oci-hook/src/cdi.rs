//! CDI spec generation (kind `aliyun.com/erdma`). (Being written.)
use crate::config::Config;
use crate::error::{Error, Result};

pub fn generate(_config: &Config) -> Result<serde_json::Value> {
    Err(Error::Invalid("cdi generate is not implemented yet".into()))
}
