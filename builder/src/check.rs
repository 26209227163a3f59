//! `check`: is an image ready for eRDMA training? Reads the image (any transport) the way
//! `build` reads a base, gathers [`crate::inspect::Facts`] and judges them. Ready means no
//! check failed; warnings do not block.
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::build::{ImageFiles, LayerCache};
use crate::error::{Error, Result};
use crate::inspect::{Facts, Loads};
use crate::packages::nccl::{Cuda, Nccl};
use crate::progress::{Counters, Reporter, Transfer};
use crate::recipe::Recipe;
use crate::registry::Registries;
use crate::source::{PlatformChoice, Source};
use crate::transport::ImageRef;

/// Requirements of a platform on top of eRDMA's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Alibaba Cloud PAI-DLC custom images: CUDA 12.1 or later, NCCL 2.19 or later, Python 3.
    PaiDlc,
}

const PAI_MIN_CUDA: Cuda = Cuda { major: 12, minor: 1 };

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub status: Status,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub image: String,
    pub digest: String,
    pub platform: Option<String>,
    pub profile: Option<Profile>,
    pub ready: bool,
    pub checks: Vec<Finding>,
    pub facts: Facts,
    /// The image's `NCCL_*` variables.
    pub nccl_env: BTreeMap<String, String>,
    pub bytes_downloaded: u64,
}

pub struct CheckOptions {
    pub image: ImageRef,
    pub platform: PlatformChoice,
    pub profile: Option<Profile>,
    pub insecure_registries: Vec<String>,
}

pub async fn check(opts: &CheckOptions, reporter: Arc<dyn Reporter>) -> Result<CheckReport> {
    let registries: Vec<&str> = opts.image.registry().into_iter().collect();
    let regs = Arc::new(Registries::new(&registries, &opts.insecure_registries));
    let counters = Counters::default();
    let work = tempfile::Builder::new().prefix("erdma-check-").tempdir().map_err(Error::io("creating work directory", std::env::temp_dir()))?;
    reporter.step(&format!("reading {}", opts.image));
    let src = Source::open(&opts.image, &regs).await?;
    let images = src.images(&opts.platform).await?;
    let img = images.first().ok_or_else(|| Error::Unsupported(format!("{} holds no image", opts.image)))?;
    let cache = LayerCache::new(work.path());
    let files = ImageFiles::new(&src, img, &cache, &reporter, &counters);
    let env = crate::inspect::env_of(&img.config);
    let arch = crate::build::debian_arch(img);
    reporter.step("looking at RDMA user space, NCCL, CUDA and Python");
    let facts = crate::inspect::facts(&files, &arch, &env)?;
    let presets = presets_for(&files)?;
    let checks = judge(&facts, &env, &presets, opts.profile);
    Ok(CheckReport {
        image: opts.image.to_string(),
        digest: src.digest().to_string(),
        platform: img.platform.as_ref().map(|p| p.0.clone()),
        profile: opts.profile,
        ready: checks.iter().all(|c| c.status != Status::Fail),
        checks,
        facts,
        nccl_env: env.iter().filter(|(k, _)| k.starts_with("NCCL_")).cloned().collect(),
        bytes_downloaded: counters.get(Transfer::Download),
    })
}

/// The env presets of the image's distro recipe (they are the same in every recipe, seed 001).
fn presets_for(files: &ImageFiles) -> Result<BTreeMap<String, String>> {
    let recipe = files
        .os_release()?
        .and_then(|os| Recipe::for_os(&os).ok())
        .filter(|r| !r.env.is_empty())
        .map_or_else(|| Recipe::load("debian-12"), Ok)?;
    Ok(recipe.env)
}

fn finding(id: &'static str, status: Status, message: String, hint: Option<&str>) -> Finding {
    Finding { id, status, message, hint: hint.map(String::from) }
}

fn nccl_text(v: Nccl, cuda: Option<Cuda>) -> String {
    match cuda {
        Some(c) => format!("{v}+cuda{c}"),
        None => v.to_string(),
    }
}

/// The checks, in the order a user fixes things.
pub fn judge(f: &Facts, env: &[(String, String)], presets: &BTreeMap<String, String>, profile: Option<Profile>) -> Vec<Finding> {
    use Status::*;
    let pai = profile == Some(Profile::PaiDlc);
    let build_hint = "erdma-build build --base IMAGE --output NEW adds the eRDMA user space";
    let mut out = Vec::new();

    out.push(match (&f.rdma.erdma_provider, f.rdma.erdma_driver) {
        (Some(lib), true) => finding("erdma-provider", Ok, format!("erdma provider {lib}"), None),
        (_, false) => finding("erdma-provider", Fail, "no erdma provider: /etc/libibverbs.d/erdma.driver is missing, so libibverbs cannot use eRDMA devices".into(), Some(build_hint)),
        (None, true) => finding("erdma-provider", Fail, "erdma.driver is there but the provider library (libibverbs/liberdma-rdmav*.so) is not".into(), Some(build_hint)),
    });
    for (id, lib, name) in [("libibverbs", &f.rdma.libibverbs, "libibverbs.so.1"), ("librdmacm", &f.rdma.librdmacm, "librdmacm.so.1")] {
        out.push(match lib {
            Some(p) => finding(id, Ok, format!("{name} at {p}"), None),
            None => finding(id, Fail, format!("{name} is missing"), Some(build_hint)),
        });
    }
    if f.rdma.libibverbs.is_some() || f.rdma.erdma_driver {
        out.push(match (crate::inspect::mixed_rdma_builds(&f.rdma), f.rdma.packages.values().next()) {
            (Some(mixed), _) => finding("rdma-core-build", Fail, format!("rdma-core packages from different builds: {mixed}"), Some(build_hint)),
            (None, Some(v)) => finding("rdma-core-build", Ok, format!("rdma-core {v} ({})", f.rdma.packages.keys().cloned().collect::<Vec<_>>().join(", ")), None),
            (None, None) => finding("rdma-core-build", Warn, "libibverbs is not installed by dpkg: cannot tell whether its provider is from the same build".into(), None),
        });
    }
    out.push(if f.ofed.is_empty() {
        finding("mellanox-ofed", Ok, "no Mellanox OFED user space".into(), None)
    } else {
        finding(
            "mellanox-ofed",
            Fail,
            format!("Mellanox OFED user space is still there: {}", f.ofed.join(", ")),
            Some("erdma-build build replaces the OFED builds of libibverbs1/ibverbs-providers/librdmacm1 and removes mellanox_mlnx_ofed.list"),
        )
    });

    out.push(match &f.cuda {
        Some(c) if pai && c.version < PAI_MIN_CUDA => finding("cuda", Fail, format!("CUDA {} ({}); PAI-DLC needs {PAI_MIN_CUDA} or later", c.version, c.source), Some("start from a CUDA 12.1+ base image")),
        Some(c) => finding("cuda", Ok, format!("CUDA {} ({})", c.version, c.source), None),
        None if pai => finding("cuda", Fail, "no CUDA found (no CUDA_VERSION, no /usr/local/cuda/version.json); PAI-DLC needs 12.1 or later".into(), Some("start from a CUDA 12.1+ base image")),
        None => finding("cuda", Warn, "no CUDA found (no CUDA_VERSION, no /usr/local/cuda/version.json)".into(), None),
    });

    out.extend(nccl_findings(f, pai));

    out.push(match &f.python3 {
        Some(p) => finding("python3", Ok, format!("Python 3 at {p}"), None),
        None if pai => finding("python3", Fail, "no python3; PAI-DLC needs Python 3".into(), Some("install python3 in the image")),
        None => finding("python3", Warn, "no python3".into(), None),
    });

    out.push(env_finding(env, presets));
    out
}

fn nccl_findings(f: &Facts, pai: bool) -> Vec<Finding> {
    use Status::*;
    let mut out = Vec::new();
    let which = match f.torch.as_ref().and_then(|t| t.loads) {
        Some(Loads::Python) => "; PyTorch loads the pip one",
        Some(Loads::System) => "; PyTorch loads the system one",
        None => "",
    };
    let pip_fix = |cuda: Option<Cuda>| format!("pip install -U nvidia-nccl-cu{}", cuda.map(|c| c.major.to_string()).unwrap_or_else(|| "12".into()));
    match f.effective_nccl() {
        None => out.push(finding(
            "nccl",
            if pai { Fail } else { Warn },
            "no NCCL in the image".into(),
            Some("erdma-build build --nccl adds NVIDIA's libnccl2 for the image's CUDA"),
        )),
        Some(n) => {
            let is_pip = f.python_nccl.first().is_some_and(|p| p.path == n.path);
            let what = format!("NCCL {} at {}{}", nccl_text(n.version, n.cuda), n.path, n.package.as_ref().map(|p| format!(" ({p})")).unwrap_or_default());
            let cuda_clash = match (n.cuda, &f.cuda) {
                (Some(built), Some(image)) if built.major != image.version.major => Some((built, image.version)),
                _ => None,
            };
            if !n.version.supports_erdma() {
                let hint = if is_pip { pip_fix(f.cuda.as_ref().map(|c| c.version).or(n.cuda)) } else { "erdma-build build --nccl latest".into() };
                out.push(Finding { id: "nccl", status: Fail, message: format!("{what}{which}: older than 2.19, which eRDMA needs"), hint: Some(hint) });
            } else if let Some((built, image)) = cuda_clash {
                out.push(finding("nccl", Fail, format!("{what}{which}: built for CUDA {built}, the image has CUDA {image}"), Some("erdma-build build --nccl picks the build for the image's CUDA")));
            } else {
                out.push(finding("nccl", Ok, format!("{what}{which}"), None));
            }
        }
    }
    // An old NCCL that is not the one loaded: a trap for whoever changes the loading later.
    let effective = f.effective_nccl().map(|n| n.path.clone());
    for other in f.system_nccl.iter().chain(&f.python_nccl) {
        if Some(&other.path) != effective.as_ref() && !other.version.supports_erdma() {
            out.push(finding("nccl-other", Warn, format!("NCCL {} at {} is older than 2.19 (not the one PyTorch loads)", nccl_text(other.version, other.cuda), other.path), None));
        }
    }
    out
}

/// The NCCL env presets: missing ones are a warning (the erdma runtime hook adds them at
/// start), values that turn eRDMA off are failures, other differences warnings.
fn env_finding(env: &[(String, String)], presets: &BTreeMap<String, String>) -> Finding {
    use Status::*;
    let get = |k: &str| env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut off = Vec::new();
    if get("NCCL_IB_DISABLE").is_some_and(|v| v.trim() == "1") {
        off.push("NCCL_IB_DISABLE=1 turns RDMA off".to_string());
    }
    if let Some(net) = get("NCCL_NET") {
        if !net.eq_ignore_ascii_case("IB") {
            off.push(format!("NCCL_NET={net} keeps NCCL off the IB/RDMA transport"));
        }
    }
    if let Some(hca) = get("NCCL_IB_HCA") {
        let names: Vec<&str> = hca.trim_start_matches(['^', '=']).split(',').map(|h| h.split(':').next().unwrap_or(h).trim()).collect();
        if hca.starts_with('^') && names.iter().any(|n| n.starts_with("erdma")) || !hca.starts_with('^') && names.iter().all(|n| n.starts_with("mlx")) {
            off.push(format!("NCCL_IB_HCA={hca} excludes the eRDMA devices"));
        }
    }
    if !off.is_empty() {
        return finding("nccl-env", Fail, off.join("; "), Some("remove these from the image's env; erdma-build build sets the PAI-DLC presets"));
    }
    let missing: Vec<&str> = presets.keys().filter(|k| get(k).is_none()).map(String::as_str).collect();
    let differ: Vec<String> = presets.iter().filter_map(|(k, want)| get(k).filter(|v| v != want).map(|v| format!("{k}={v} (preset {want})"))).collect();
    match (missing.is_empty(), differ.is_empty()) {
        (true, true) => finding("nccl-env", Ok, "the NCCL presets for eRDMA are set".into(), None),
        _ => {
            let mut parts = Vec::new();
            if !missing.is_empty() {
                parts.push(format!("not set: {}", missing.join(" ")));
            }
            if !differ.is_empty() {
                parts.push(format!("differ from the presets: {}", differ.join(", ")));
            }
            finding("nccl-env", Warn, parts.join("; "), Some("erdma-build build sets the presets; the erdma runtime hook also adds missing ones when a container starts"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn env_contradictions_fail_and_differences_warn() {
        let presets: BTreeMap<String, String> = [("NCCL_IB_HCA", "erdma"), ("NCCL_DEBUG", "INFO")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(env_finding(&env(&[("NCCL_IB_HCA", "erdma"), ("NCCL_DEBUG", "INFO")]), &presets).status, Status::Ok);
        let w = env_finding(&env(&[("NCCL_IB_HCA", "erdma_0,erdma_1"), ("NCCL_DEBUG", "WARN")]), &presets);
        assert_eq!((w.status, w.message.as_str()), (Status::Warn, "differ from the presets: NCCL_DEBUG=WARN (preset INFO), NCCL_IB_HCA=erdma_0,erdma_1 (preset erdma)"));
        for bad in [("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "Socket"), ("NCCL_IB_HCA", "mlx5_0,mlx5_1"), ("NCCL_IB_HCA", "^erdma")] {
            let f = env_finding(&env(&[bad]), &presets);
            assert_eq!(f.status, Status::Fail, "{bad:?}: {f:?}");
        }
        assert_eq!(env_finding(&env(&[]), &presets).message, "not set: NCCL_DEBUG NCCL_IB_HCA");
    }
}
