//! The version line every erdma-kit program prints with `--version`, made at build time:
//! `0.1.0 (commit 1a2b3c4d5e6f, x86_64-unknown-linux-musl)`.
//!
//! A build script calls [`emit`]; the crate then reads the line with
//! `env!("ERDMA_VERSION")` (clap: `#[command(version = env!("ERDMA_VERSION"))]`).
//!
//! - **version**: the workspace's (`CARGO_PKG_VERSION`).
//! - **commit**: `ERDMA_COMMIT` when set (`scripts/dist` sets it, with `-dirty` for a tree
//!   with changes), else `git rev-parse --short=12 HEAD` of the checkout for a release build,
//!   else `unknown` (a source tree without git). Debug builds (tests, `cargo run`) say `dev`
//!   and do not watch git: a commit would otherwise rebuild every crate of the package, the
//!   library included, since a build script's output applies to all its targets.
//! - **target**: the target triple the program was built for (`TARGET`).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Prints the `cargo:` lines that set `ERDMA_VERSION` for the crate being built. Call from
/// `build.rs`.
pub fn emit() {
    println!("cargo:rerun-if-env-changed=ERDMA_COMMIT");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    let commit = match std::env::var("ERDMA_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ if std::env::var("PROFILE").as_deref() == Ok("debug") => "dev".to_string(),
        _ => {
            let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
            git_commit(&dir).unwrap_or_else(|| "unknown".to_string())
        }
    };
    println!("cargo:rustc-env=ERDMA_VERSION={}", line(&version, &commit, &target));
}

/// The version line from its parts.
pub fn line(version: &str, commit: &str, target: &str) -> String {
    format!("{version} (commit {commit}, {target})")
}

/// HEAD's commit of the checkout `dir` is in, with the files to watch for a new one (HEAD,
/// the branch's ref, packed refs) printed as `rerun-if-changed`.
fn git_commit(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !s.is_empty()).then_some(s)
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD is the checkout's own (a linked worktree has its own); branches and packed refs
    // are in the common directory.
    let abs = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let git_dir = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from);
    let common = git(&["rev-parse", "--git-common-dir"]).map(abs);
    if let (Some(git_dir), Some(common)) = (git_dir, common) {
        let mut watch = vec![git_dir.join("HEAD"), common.join("packed-refs")];
        watch.extend(git(&["symbolic-ref", "-q", "HEAD"]).map(|r| common.join(r)));
        // A missing file would make cargo run the script on every build.
        for f in watch.iter().filter(|f| f.exists()) {
            println!("cargo:rerun-if-changed={}", f.display());
        }
    }
    Some(commit)
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_names_version_commit_and_target() {
        assert_eq!(
            super::line("0.1.0", "1a2b3c4d5e6f", "aarch64-unknown-linux-musl"),
            "0.1.0 (commit 1a2b3c4d5e6f, aarch64-unknown-linux-musl)"
        );
    }
}
