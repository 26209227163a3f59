//! Installing with the image's own package manager (dpkg, rpm) inside a sandbox over the base's
//! root, for both backends: the path a build takes when a maintainer script or scriptlet can be
//! neither emulated nor shown to be without effect, so that the result is what the package
//! manager itself gives in a container of the base.
//!
//! The packages are the ones the backend resolved and verified. The base's layers are applied
//! to a tree on disk ([`erdma_oci::rootdir`]) with the layer built so far; the package files go
//! in; the sandbox ([`crate::sandbox`]) runs the backend's commands with the image's `/bin/sh`;
//! the package files come out again, and the layer gets what differs from the tree before the
//! run (`apt/sandboxed.rs` and `rpm/sandboxed.rs` say what runs).
//!
//! No `policy-rc.d` is added (the base's own, if it has one, applies): `apt-get install` in a
//! container of the base has none either, and helpers read it for more than starts (Debian 13's
//! runit-helper enables a service only where policy-rc.d allows its start). Services stay
//! stopped all the same: there is no init (`invoke-rc.d` finds no runlevel, and systemd's
//! helpers no running systemd), and whatever a script does start is killed with the sandbox's
//! PID namespace when the run ends.
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::packages::error::PackageError;
use crate::packages::{Inputs, SandboxRun};
use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_oci::rootdir::RootDir;

/// Host uid and gid of the sandbox's root: the start of a range no host account uses (its
/// 65536 ids map the image's 0–65535).
pub(crate) const SHIFT: u32 = 1 << 30;

/// Where the package files wait inside the root during the run (removed before the layer is
/// taken).
pub(crate) const INBOX: &str = "tmp/erdma-build.packages";

/// The environment the image's package manager runs with: non-interactive, as in a
/// Dockerfile's `RUN`.
const ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("HOME", "/root"),
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("DEBCONF_NONINTERACTIVE_SEEN", "true"),
];

/// What a run works over and on: the base, the layer so far (which gets the changes), the
/// build's inputs and its progress.
pub(crate) struct Over<'a, 'i> {
    pub base: &'a dyn BaseFiles,
    pub layer: &'a mut LayerContents,
    pub inputs: &'a Inputs<'i>,
    pub reporter: &'a dyn Reporter,
}

/// One run of the image's package manager.
pub(crate) struct Job<'a> {
    /// What made the run needed (`package script (`command`)`).
    pub because: String,
    /// The tool, for messages (`dpkg`, `rpm`).
    pub tool: &'static str,
    /// What the base must have for the run (`usr/bin/dpkg`), besides `/bin/sh`.
    pub needs: &'static str,
    /// Package files: the name inside [`INBOX`] and the verified file here.
    pub files: Vec<(String, &'a Path)>,
    /// Shell commands, run in order under `set -e`.
    pub commands: Vec<String>,
}

fn error(because: &str, why: String) -> Error {
    PackageError::Sandbox { because: because.to_string(), why }.into()
}

/// What a build would run and read, for `plan`.
pub(crate) fn plan(job: Job<'_>, base: &dyn BaseFiles) -> SandboxRun {
    let layers = base.layers();
    SandboxRun {
        because: job.because,
        commands: job.commands,
        layers_read: layers.len(),
        bytes_read: layers.iter().map(|(_, s)| s).sum(),
        not_taken: Vec::new(),
    }
}

/// Runs `job` over the base and the layer so far, and adds what it changed to `layer`.
/// Returns the paths removed and what to report.
pub(crate) fn run(job: Job<'_>, over: Over<'_, '_>) -> Result<(Vec<String>, SandboxRun)> {
    let Over { base, layer, inputs, reporter } = over;
    let because = job.because.as_str();
    // What stops a sandbox from working, said before any layer is read.
    if !rustix::process::geteuid().is_root() {
        return Err(error(because, crate::sandbox::SandboxError::NotRoot.to_string()));
    }
    for tool in ["bin/sh", job.needs] {
        if base.real_path(tool)?.map(|p| base.kind(&p)).transpose()?.flatten().is_none() {
            return Err(error(because, format!("the base has no /{tool} to run them with")));
        }
    }
    let place = work_place(&inputs.cache_dir).ok_or_else(|| {
        error(because, format!(
            "no place for the sandbox's root that its ids may enter: {}, $TMPDIR, /var/tmp and /tmp each have a parent closed to other users",
            inputs.cache_dir.display()
        ))
    })?;
    let work = tempfile::Builder::new()
        .prefix("erdma-build-sandbox-")
        .tempdir_in(&place)
        .map_err(|e| Error::io("creating a sandbox in", &place)(e))?;
    // Only the sandbox's ids (and root here) may enter it.
    std::os::unix::fs::chown(work.path(), Some(SHIFT), Some(SHIFT))
        .map_err(|e| Error::io("setting the owner of", work.path())(e))?;
    let root = RootDir::create(&work.path().join("root"), SHIFT)?;
    let layers = base.layers();
    let bytes: u64 = layers.iter().map(|(_, s)| s).sum();
    reporter.step(&format!(
        "reading the base's {} layers ({:.1} MB) to run maintainer scripts in a sandbox",
        layers.len(),
        bytes as f64 / 1e6
    ));
    let mut not_taken = Vec::new();
    for (i, (digest, _)) in layers.iter().enumerate() {
        let mut tar = base.layer_tar(i)?;
        let applied = tokio::task::block_in_place(|| root.apply(digest, &mut *tar))?;
        not_taken.extend(applied.skipped);
    }
    // The layer so far (repository files, removals), as the image will have it.
    let so_far = work.path().join("so-far.tar");
    let f = std::fs::File::create(&so_far).map_err(|e| Error::io("writing", &so_far)(e))?;
    layer.write_tar(f, 0).map_err(|e| Error::io("writing", &so_far)(e))?;
    let mut f = std::fs::File::open(&so_far).map_err(|e| Error::io("reading", &so_far)(e))?;
    root.apply("(this build's layer)", &mut f)?;

    let before = root.scan()?;
    root.put_dir(INBOX)?;
    for (name, path) in &job.files {
        let mut f = std::fs::File::open(path).map_err(|e| Error::io("reading", *path)(e))?;
        root.put_file(&format!("{INBOX}/{name}"), &mut f, 0o644)?;
    }
    reporter.step(&format!(
        "running {} in the sandbox for {} packages (scripts of {because} included)",
        job.tool,
        job.files.len()
    ));
    let script = format!("set -e\n{}\n", job.commands.join("\n"));
    let ran = crate::sandbox::run(root.path(), SHIFT, &["/bin/sh", "-c", &script], ENV)
        .map_err(|e| error(because, e.to_string()))?;
    if ran.status != 0 {
        let text = String::from_utf8_lossy(&ran.output);
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = tail[tail.len().saturating_sub(3)..].join(" / ");
        return Err(error(
            because,
            format!("{} exited with status {}: {tail}", job.tool, ran.status),
        ));
    }
    root.remove(INBOX)?;
    let after = root.scan()?;
    let (removed, skipped) = root.changes(&before, &after, layer)?;
    not_taken.extend(skipped);
    Ok((
        removed,
        SandboxRun {
            because: job.because,
            commands: job.commands,
            layers_read: layers.len(),
            bytes_read: bytes,
            not_taken,
        },
    ))
}

/// A directory for the sandbox's tree whose every parent other users may pass through: the
/// sandbox's root is not the host's root, and reaches its tree by path (the cache under
/// `/root/.cache` would be closed to it). Then `$TMPDIR` if set, then `/var/tmp` (on disk where
/// `/tmp` may be a tmpfs too small for a large base), then `/tmp`.
fn work_place(cache: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let open = |dir: &Path| {
        std::fs::create_dir_all(dir).is_ok()
            && dir.canonicalize().is_ok_and(|d| {
                d.ancestors().all(|a| {
                    std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
                })
            })
    };
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    [Some(cache.to_path_buf()), tmpdir, Some("/var/tmp".into()), Some("/tmp".into())]
        .into_iter()
        .flatten()
        .find(|d| open(d))
}

/// A file name for a package inside [`INBOX`]: the characters package names and versions
/// use, anything else as `_`.
pub(crate) fn file_name(name: &str, version: &str, arch: &str, ext: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() || "+-.~".contains(c) { c } else { '_' })
            .collect()
    };
    format!("{}_{}_{}.{ext}", clean(name), clean(version), clean(arch))
}
