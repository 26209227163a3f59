//! The `erdma-build` binary: parse arguments, set up logging and progress, call the library,
//! print the result, map errors to an exit code.
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Parser;
use erdma_build::build::Report;
use erdma_build::cli::{Cli, Command};
use erdma_build::packages::Action;
use erdma_common::progress::{Reporter, Silent, Transfer};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

fn main() -> ExitCode {
    // The sandbox's own processes (erdma_build::sandbox): before anything starts a thread.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|a| a.to_str()) {
        Some(erdma_build::sandbox::HELPER) => {
            return erdma_build::sandbox::helper_main(&args[2..], unshare)
        }
        Some(erdma_build::sandbox::INIT) => return erdma_build::sandbox::init_main(&args[2..]),
        Some(erdma_build::packages::sandboxed::JOB) => {
            return erdma_build::packages::sandboxed::job_main(&args[2..], unshare)
        }
        _ => {}
    }
    let cli = Cli::parse();
    // Log lines and progress bars share stderr: each log line is written with the bars taken
    // down and redrawn after it, so neither tears the other.
    let multi = MultiProgress::new();
    // Only erdma-build speaks: its own warnings (none under --quiet), no dependency's log lines
    // (reqwest, rustls and hyper log through `log`; a certificate failure would print as theirs).
    // RUST_LOG overrides, for debugging.
    // Every crate of ours that erdma-build runs: the registry client, the package formats, …
    const OURS: &str = "erdma_build=warn,erdma_oci=warn,erdma_deb=warn,erdma_openpgp=warn,erdma_http=warn,erdma_limits=warn,erdma_common=warn";
    let own = if cli.quiet { "off" } else { OURS };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| own.into()),
        )
        .with_target(false)
        .with_writer(BelowBars(multi.clone()))
        .with_ansi(std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal())
        .without_time()
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(&anyhow::Error::new(e).context("starting the async runtime")),
    };
    let checking = matches!(cli.command, Command::Check(_));
    match runtime.block_on(run(cli, multi)) {
        Ok(code) => code,
        // `check` keeps 1 for "not ready": a check that could not run exits 2.
        Err(e) if checking => {
            fail(&e);
            ExitCode::from(2)
        }
        Err(e) => fail(&e),
    }
}

/// `unshare(2)` for the sandbox helper: the workspace's one unsafe call outside
/// erdma-runtime's `main` (CONTRIBUTING.md).
#[allow(unsafe_code)]
fn unshare(flags: rustix::thread::UnshareFlags) -> std::io::Result<()> {
    // SAFETY: `unshare_unsafe` is unsafe only for `CLONE_FILES`, which would leave other
    // threads with file descriptors this one no longer shares; the flags here never include
    // it, and the helper that calls this has started no thread.
    assert!(!flags.contains(rustix::thread::UnshareFlags::FILES));
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(std::io::Error::from)
}

/// Prints `error: …`, the cause chain, and a hint where we have one.
fn fail(e: &anyhow::Error) -> ExitCode {
    // A reader that went away (`erdma-build plan --json | head`) is not an error (as ripgrep).
    if e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    }) {
        return ExitCode::SUCCESS;
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "error: {e}");
    for cause in e.chain().skip(1) {
        let _ = writeln!(err, "  Caused by: {cause}");
    }
    // The outermost error of the chain that has a hint gives it (erdma_build::error::hint).
    if let Some(hint) = e.chain().find_map(erdma_build::error::hint) {
        let _ = writeln!(err, "hint: {hint}");
    }
    ExitCode::from(1)
}

async fn run(cli: Cli, multi: MultiProgress) -> anyhow::Result<ExitCode> {
    // A terminal gets bars; a CI log gets one timed line per step (no bars to garble it).
    let reporter: Arc<dyn Reporter> = if cli.quiet {
        Arc::new(Silent)
    } else if std::io::stderr().is_terminal() {
        Arc::new(Bars { multi, bars: Mutex::default() })
    } else {
        Arc::new(Lines(std::time::Instant::now()))
    };
    match cli.command {
        Command::Recipes => {
            let recipes = erdma_build::recipe::builtin()?;
            let mut out = std::io::stdout().lock();
            if cli.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&recipes)?)?;
            } else {
                for r in recipes {
                    let status = r
                        .unsupported
                        .as_deref()
                        .map(|u| format!(" (unsupported: {u})"))
                        .unwrap_or_default();
                    writeln!(out, "{:<14} {}{}", r.name, r.distro.pretty, status)?;
                }
            }
        }
        Command::Plan(args) => {
            let opts = args.resolve()?;
            let report = erdma_build::build::plan(&opts, reporter).await?;
            print_report(&report, cli.json, false)?;
        }
        Command::Build(args) => {
            let opts = args.common.resolve()?;
            let output = erdma_oci::transport::ImageRef::parse(&args.output)?;
            let report = erdma_build::build::build(&opts, &output, reporter).await?;
            print_report(&report, cli.json, true)?;
        }
        Command::Check(args) => {
            let opts = erdma_build::check::CheckOptions {
                image: erdma_oci::transport::ImageRef::parse(&args.image)?,
                platform: match args.platform {
                    Some(p) => {
                        erdma_oci::source::PlatformChoice::One(erdma_oci::source::Platform(p))
                    }
                    None => {
                        erdma_oci::source::PlatformChoice::One(erdma_oci::source::Platform::host())
                    }
                },
                profile: args.profile,
                registry: args.registry.options(),
                limits: args.limits.limits(),
            };
            let report = erdma_build::check::check(&opts, reporter).await?;
            print_check(&report, cli.json)?;
            return Ok(if report.ready { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
        Command::SelfImage(args) => {
            let report = erdma_build::self_image::write(&args.options()?, reporter).await?;
            let mut out = std::io::stdout().lock();
            if cli.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                writeln!(out, "wrote {} ({})", report.output, report.digest)?;
                for i in &report.images {
                    writeln!(
                        out,
                        "  {:<12} {} ({})",
                        i.platform,
                        i.manifest_digest,
                        i.binary.display()
                    )?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_check(r: &erdma_build::check::CheckReport, json: bool) -> anyhow::Result<()> {
    use erdma_build::check::Status;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(r)?)?;
        return Ok(());
    }
    let fails = r.checks.iter().filter(|c| c.status == Status::Fail).count();
    let warns = r.checks.iter().filter(|c| c.status == Status::Warn).count();
    let profile = r.profile.map(|p| format!(" (profile {p})")).unwrap_or_default();
    for c in &r.checks {
        let mark = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        writeln!(out, "{mark} {:<16} {}", c.id, c.message)?;
        if let Some(h) = &c.hint {
            writeln!(out, "     {:<16} hint: {h}", "")?;
        }
    }
    let verdict = if r.ready { "ready" } else { "NOT READY" };
    let plural = if warns == 1 { "" } else { "s" };
    writeln!(out, "{}{profile}: {verdict} ({fails} failed, {warns} warning{plural})", r.image)?;
    Ok(())
}

fn print_report(r: &Report, json: bool, built: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(r)?)?;
        return Ok(());
    }
    if built {
        writeln!(
            out,
            "wrote {} ({})",
            r.output.as_deref().unwrap_or("-"),
            r.digest.as_deref().unwrap_or("-")
        )?;
    } else {
        writeln!(out, "plan for {} ({})", r.base, r.base_digest)?;
    }
    if let Some(p) = r.profile {
        writeln!(out, "profile {p}: its hosts' NCCL settings are baked in")?;
    }
    for img in &r.images {
        writeln!(
            out,
            "{}recipe {}: {}",
            img.platform.as_ref().map(|p| format!("[{p}] ")).unwrap_or_default(),
            img.recipe,
            img.distro
        )?;
        for f in &img.files_added {
            writeln!(out, "  + {f}")?;
        }
        for f in &img.files_removed {
            writeln!(out, "  - {f}")?;
        }
        if let Some(p) = &img.packages {
            print_packages(&mut out, p)?;
        }
        if let Some(n) = &img.nccl {
            writeln!(
                out,
                "  nccl libnccl2 {} for CUDA {} ({}), held against apt upgrades",
                n.libnccl2, n.cuda.version, n.cuda.source
            )?;
            for p in &n.python_nccl {
                writeln!(out, "  nccl from pip: {} at {}", p.version, p.path)?;
            }
        }
        for k in &img.keys {
            let how = match k.trust {
                "pinned" => "pinned by the recipe",
                "keyring" => "from --keyring",
                _ => "trusted on first use, not pinned",
            };
            writeln!(
                out,
                "  key {} {} ({how}; {})",
                k.repository,
                k.fingerprints.join(", "),
                k.source
            )?;
        }
        for w in &img.warnings {
            writeln!(out, "  warning: {w}")?;
        }
        for e in &img.env {
            let was = e.replaced.as_ref().map(|v| format!(" (was {v})")).unwrap_or_default();
            let from = match (e.source, r.profile) {
                (erdma_oci::config::EnvSource::Profile, Some(p)) => {
                    format!(" (profile {p})")
                }
                (erdma_oci::config::EnvSource::Recipe, _) => " (recipe)".to_string(),
                _ => String::new(),
            };
            writeln!(out, "  env {}={}{}{}", e.name, e.value, was, from)?;
        }
        let total: u64 = img.base_layers.iter().map(|l| l.size).sum();
        let layer = match &img.layer {
            Some(l) => format!("new layer {} ({} bytes)", l.digest, l.size),
            None => "new layer known after the packages are downloaded".to_string(),
        };
        writeln!(
            out,
            "  base layers reused: {} ({} bytes), {layer}",
            img.base_layers.len(),
            total
        )?;
    }
    if built {
        let debs: u64 =
            r.images.iter().filter_map(|i| i.packages.as_ref()).map(|p| p.downloaded_bytes).sum();
        writeln!(
            out,
            "downloaded {} bytes of image layers and {} bytes of packages, uploaded {} bytes",
            r.bytes_downloaded, debs, r.bytes_uploaded
        )?;
    }
    Ok(())
}

/// The packages part of one image's report, as `plan` and `build` print it.
fn print_packages(
    out: &mut impl Write,
    p: &erdma_build::packages::PackagesReport,
) -> anyhow::Result<()> {
    for c in &p.install {
        let what = match &c.action {
            Action::Install => "install".to_string(),
            Action::Upgrade { from } => format!("upgrade from {from}"),
            Action::Replace { from } => format!("replace {}", from.join(", ")),
            Action::Downgrade { from } => format!("downgrade from {from}"),
        };
        writeln!(out, "  package {} {} ({what}; {})", c.name, c.version, c.origin)?;
    }
    for s in &p.selected {
        writeln!(out, "  selecting {} for {} (a virtual package)", s.package, s.requested)?;
    }
    for d in &p.unsigned {
        writeln!(
            out,
            "  UNSIGNED package {} {} from {} (sha256:{})",
            d.name, d.version, d.source, d.sha256
        )?;
    }
    for k in &p.kept {
        writeln!(out, "  package {} {} (already installed)", k.name, k.version)?;
    }
    for g in &p.remove {
        writeln!(out, "  package {} {} (remove)", g.name, g.version)?;
    }
    for f in &p.special_files {
        let what = match (f.major, f.minor) {
            (Some(major), Some(minor)) => {
                format!("{} device {} {major}:{minor}", f.kind, f.path)
            }
            _ if f.created => format!("{} file {}", f.kind, f.path),
            _ => format!("{} {}", f.kind, f.path),
        };
        let created = if f.created { "" } else { ", not created" };
        writeln!(out, "  {what} (mode {}{created}) in package {}", f.mode, f.package)?;
    }
    if !p.recommends_left_out.is_empty() {
        writeln!(
            out,
            "  recommended, not installed (as --no-install-recommends): {}",
            p.recommends_left_out.join(", ")
        )?;
    }
    for sc in &p.scripts {
        writeln!(out, "  script {sc}")?;
    }
    if let Some(sb) = &p.sandbox {
        writeln!(
            out,
            "  sandbox: the image's dpkg runs the scripts, needed for {}; base layers read: {} ({} bytes)",
            sb.because, sb.layers_read, sb.bytes_read
        )?;
        match sb.tree.strip_prefix("disk") {
            Some(why) => writeln!(out, "    its root assembled on disk{why}")?,
            None if !sb.tree.is_empty() => writeln!(out, "    its root assembled in {}", sb.tree)?,
            None => {}
        }
        for c in &sb.commands {
            writeln!(out, "    {c}")?;
        }
        if !sb.not_taken.is_empty() {
            writeln!(out, "    left out of the layer: {}", sb.not_taken.join(", "))?;
        }
    }
    if !p.not_inspected.is_empty() {
        writeln!(
            out,
            "  payloads and scripts not read (not downloaded; plan --download reads them): {}",
            p.not_inspected.join(", ")
        )?;
    }
    Ok(())
}

/// Steps as plain lines on stderr with the time since the start, for logs.
struct Lines(std::time::Instant);

impl Reporter for Lines {
    fn step(&self, message: &str) {
        eprintln!("[{:6.2}s] {message}", self.0.elapsed().as_secs_f64());
    }
}

/// The log's writer: stderr, with the progress bars cleared while a line is written.
#[derive(Clone)]
struct BelowBars(MultiProgress);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BelowBars {
    type Writer = BelowBars;
    fn make_writer(&'a self) -> BelowBars {
        self.clone()
    }
}

impl Write for BelowBars {
    /// tracing's formatter writes each event whole, in one call.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.suspend(|| std::io::stderr().lock().write_all(buf))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Progress bars on stderr, one per transfer.
struct Bars {
    multi: MultiProgress,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl Reporter for Bars {
    fn transfer_start(&self, id: &str, kind: Transfer, total: Option<u64>) {
        let bar = self.multi.add(ProgressBar::new(total.unwrap_or(0)));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        bar.set_prefix(match kind {
            Transfer::Download => "download",
            Transfer::Upload => "upload",
        });
        bar.set_message(id.to_string());
        self.bars.lock().expect("poisoned").insert(id.to_string(), bar);
    }
    fn transfer_progress(&self, id: &str, bytes: u64) {
        if let Some(b) = self.bars.lock().expect("poisoned").get(id) {
            b.inc(bytes);
        }
    }
    fn transfer_done(&self, id: &str) {
        if let Some(b) = self.bars.lock().expect("poisoned").remove(id) {
            b.finish_and_clear();
        }
    }
    fn step(&self, message: &str) {
        let _ = self.multi.println(format!("==> {message}"));
    }
}
