//! The `prestart`/`createRuntime` hook for engines that can only run a hook. (Being written.)
use crate::config::Config;
use crate::error::{Error, Result};

pub fn run(_config: &Config, _state: &[u8]) -> Result<()> {
    Err(Error::Invalid("prestart is not implemented yet".into()))
}
