//! Podman's hooks.d `precreate` stage: the spec on stdin, the edited spec on stdout.
//! (Being written.)
use std::io::{Read, Write};

use crate::config::Config;
use crate::error::{Error, Result};

pub fn precreate(_config: &Config, _input: &mut dyn Read, _output: &mut dyn Write) -> Result<()> {
    Err(Error::Invalid("precreate is not implemented yet".into()))
}
