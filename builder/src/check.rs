//! `check`: is an image ready for eRDMA training? Reads the image (any transport) the way
//! `build` reads a base, gathers [`crate::inspect::Facts`] and judges them. Ready means no
//! check failed; warnings do not block.
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::inspect::{Facts, Loads};
use crate::packages::nccl::{Cuda, Nccl};
use erdma_common::progress::{Counters, Reporter, Transfer};
use erdma_oci::files::{ImageFiles, LayerCache};
use erdma_oci::registry::Registries;
use erdma_oci::source::{PlatformChoice, Source};
use erdma_oci::transport::ImageRef;

/// Requirements of a platform on top of eRDMA's own (defined beside the env presets it bakes).
pub use crate::env_presets::Profile;

const PAI_MIN_CUDA: Cuda = Cuda { major: 12, minor: 1 };

pub use erdma_common::check::{Finding, Status};

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
    /// `--insecure-registry`, `--cert-dir`.
    pub registry: erdma_oci::registry::RegistryOptions,
    /// `--max-layers`, `--max-inflation`, `--max-entries`.
    pub limits: erdma_limits::Limits,
}

pub async fn check(opts: &CheckOptions, reporter: Arc<dyn Reporter>) -> Result<CheckReport> {
    let regs = Arc::new(Registries::new(&opts.registry));
    let counters = Counters::default();
    let work = tempfile::Builder::new()
        .prefix("erdma-check-")
        .tempdir()
        .map_err(Error::io("creating work directory", std::env::temp_dir()))?;
    reporter.step(&format!("reading {}", opts.image));
    let src = Source::open(&opts.image, &regs, opts.limits).await?;
    let images = src.images(&opts.platform).await?;
    let img = images.first().ok_or_else(|| Error::NoImage { reference: opts.image.to_string() })?;
    let cache = LayerCache::new(work.path());
    let files = ImageFiles::new(&src, img, &cache, &reporter, &counters);
    let env = crate::inspect::env_of(&img.config);
    let arch = erdma_oci::files::debian_arch(img);
    reporter.step("looking at RDMA user space, NCCL, CUDA and Python");
    let facts = crate::inspect::facts(&files, &arch, &env)?;
    let checks = judge(&facts, &env, opts.profile);
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

fn finding(id: &'static str, status: Status, message: String, hint: Option<&str>) -> Finding {
    Finding::new(id, status, message, hint.map(String::from))
}

fn nccl_text(v: Nccl, cuda: Option<Cuda>) -> String {
    match cuda {
        Some(c) => format!("{v}+cuda{c}"),
        None => v.to_string(),
    }
}

/// The checks, in the order a user fixes things.
pub fn judge(f: &Facts, env: &[(String, String)], profile: Option<Profile>) -> Vec<Finding> {
    use Status::*;
    let pai = profile == Some(Profile::PaiDlc);
    let build_hint = "erdma-build build --base IMAGE --output NEW adds the eRDMA user space";
    let mut out = Vec::new();

    out.push(match (&f.rdma.erdma_provider, f.rdma.erdma_driver) {
        (Some(lib), true) => finding("erdma-provider", Ok, format!("erdma provider {lib}"), None),
        (_, false) => finding("erdma-provider", Fail, "no erdma provider: /etc/libibverbs.d/erdma.driver is missing, so libibverbs cannot use eRDMA devices".into(), Some(build_hint)),
        (None, true) => finding("erdma-provider", Fail, "erdma.driver is there but the provider library (libibverbs/liberdma-rdmav*.so) is not".into(), Some(build_hint)),
    });
    for (id, lib, name) in [
        ("libibverbs", &f.rdma.libibverbs, "libibverbs.so.1"),
        ("librdmacm", &f.rdma.librdmacm, "librdmacm.so.1"),
    ] {
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
        None if pai => finding(
            "python3",
            Fail,
            "no python3; PAI-DLC needs Python 3".into(),
            Some("install python3 in the image"),
        ),
        None => finding("python3", Warn, "no python3".into(), None),
    });

    out.push(env_finding(env, &crate::env_presets::for_profile(profile), profile));
    out.extend(host_env_findings(env, profile));
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
    let pip_fix = |cuda: Option<Cuda>| {
        format!(
            "pip install -U nvidia-nccl-cu{}",
            cuda.map(|c| c.major.to_string()).unwrap_or_else(|| "12".into())
        )
    };
    match f.effective_nccl() {
        None => out.push(finding(
            "nccl",
            if pai { Fail } else { Warn },
            "no NCCL in the image".into(),
            Some("erdma-build build --nccl adds NVIDIA's libnccl2 for the image's CUDA"),
        )),
        Some(n) => {
            let is_pip = f.python_nccl.first().is_some_and(|p| p.path == n.path);
            let what = format!(
                "NCCL {} at {}{}",
                nccl_text(n.version, n.cuda),
                n.path,
                n.package.as_ref().map(|p| format!(" ({p})")).unwrap_or_default()
            );
            let cuda_clash = match (n.cuda, &f.cuda) {
                (Some(built), Some(image)) if built.major != image.version.major => {
                    Some((built, image.version))
                }
                _ => None,
            };
            if !n.version.supports_erdma() {
                let hint = if is_pip {
                    pip_fix(f.cuda.as_ref().map(|c| c.version).or(n.cuda))
                } else {
                    "erdma-build build --nccl latest".into()
                };
                out.push(Finding::fail(
                    "nccl",
                    format!("{what}{which}: older than 2.19, which eRDMA needs"),
                    hint,
                ));
            } else if let Some((built, image)) = cuda_clash {
                out.push(finding(
                    "nccl",
                    Fail,
                    format!("{what}{which}: built for CUDA {built}, the image has CUDA {image}"),
                    Some("erdma-build build --nccl picks the build for the image's CUDA"),
                ));
            } else if n.version < erdma_common::nccl::GID_BY_ADDRESS {
                // Works over eRDMA, but not on hosts whose ERIs' GID indexes differ.
                let hint = if is_pip {
                    pip_fix(f.cuda.as_ref().map(|c| c.version).or(n.cuda))
                } else {
                    "erdma-build build --nccl latest".into()
                };
                out.push(Finding::warn(
                    "nccl",
                    format!("{what}{which}: before 2.21 NCCL cannot choose each ERI's GID by address (NCCL_IB_GID_INDEX=-1), which erdma-oci-hook sets on hosts whose ERIs' GID indexes differ"),
                    hint,
                ));
            } else {
                out.push(finding("nccl", Ok, format!("{what}{which}"), None));
            }
        }
    }
    // An old NCCL that is not the one loaded: a trap for whoever changes the loading later.
    let effective = f.effective_nccl().map(|n| n.path.clone());
    for other in f.system_nccl.iter().chain(&f.python_nccl) {
        if Some(&other.path) != effective.as_ref() && !other.version.supports_erdma() {
            out.push(finding(
                "nccl-other",
                Warn,
                format!(
                    "NCCL {} at {} is older than 2.19 (not the one PyTorch loads)",
                    nccl_text(other.version, other.cuda),
                    other.path
                ),
                None,
            ));
        }
    }
    out
}

/// The NCCL env presets ([`crate::env_presets`], with the profile's): missing ones are a
/// warning (erdma-oci-hook adds them at start), values that turn eRDMA off are failures, other
/// differences warnings.
fn env_finding(
    env: &[(String, String)],
    presets: &BTreeMap<String, String>,
    profile: Option<Profile>,
) -> Finding {
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
        let names: Vec<&str> = hca
            .trim_start_matches(['^', '='])
            .split(',')
            .map(|h| h.split(':').next().unwrap_or(h).trim())
            .collect();
        if hca.starts_with('^') && names.iter().any(|n| n.starts_with("erdma"))
            || !hca.starts_with('^') && names.iter().all(|n| n.starts_with("mlx"))
        {
            off.push(format!("NCCL_IB_HCA={hca} excludes the eRDMA devices"));
        }
    }
    if !off.is_empty() {
        return finding(
            "nccl-env",
            Fail,
            off.join("; "),
            Some("remove these from the image's env"),
        );
    }
    let missing: Vec<&str> =
        presets.keys().filter(|k| get(k).is_none()).map(String::as_str).collect();
    let differ: Vec<String> = presets
        .iter()
        .filter_map(|(k, want)| {
            get(k).filter(|v| v != want).map(|v| format!("{k}={v} (preset {want})"))
        })
        .collect();
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
            let hint = match profile {
                Some(p) => format!("erdma-build build --profile {p} sets them ({} runs no hook to add them at start)", p.platform()),
                None => "erdma-build build sets them; erdma-oci-hook also adds missing ones when a container starts".into(),
            };
            Finding::warn("nccl-env", parts.join("; "), hint)
        }
    }
}

/// Host data baked into the image ([`erdma_common::nccl::HOST_SPECIFIC`]): a warning each,
/// saying what breaks where. A profile's hosts are known, so its own values are expected there
/// (and others already differ from its presets).
fn host_env_findings(env: &[(String, String)], profile: Option<Profile>) -> Vec<Finding> {
    use erdma_common::nccl::{host_specific, HOST_SPECIFIC};
    if profile.is_some() {
        return Vec::new();
    }
    let get = |k: &str| env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let baked: Vec<String> =
        HOST_SPECIFIC.iter().filter_map(|k| host_specific(k, get(k)?)).collect();
    if baked.is_empty() {
        return vec![finding(
            "nccl-host-env",
            Status::Ok,
            format!(
                "no host-specific NCCL settings in the image ({} are left to the host)",
                HOST_SPECIFIC.join(", ")
            ),
            None,
        )];
    }
    let hint = "leave it to erdma-oci-hook, which derives it per container, or set it at run time (docker run -e, the pod's env); rebuild from a base without it, or check with --profile pai-dlc if the image is for PAI-DLC";
    baked.into_iter().map(|m| finding("nccl-host-env", Status::Warn, m, Some(hint))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::NcclFact;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn env_contradictions_fail_and_differences_warn() {
        let presets: BTreeMap<String, String> = [("NCCL_IB_HCA", "erdma"), ("NCCL_DEBUG", "INFO")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            env_finding(&env(&[("NCCL_IB_HCA", "erdma"), ("NCCL_DEBUG", "INFO")]), &presets, None)
                .status,
            Status::Ok
        );
        let w = env_finding(
            &env(&[("NCCL_IB_HCA", "erdma_0,erdma_1"), ("NCCL_DEBUG", "WARN")]),
            &presets,
            None,
        );
        assert_eq!((w.status, w.message.as_str()), (Status::Warn, "differ from the presets: NCCL_DEBUG=WARN (preset INFO), NCCL_IB_HCA=erdma_0,erdma_1 (preset erdma)"));
        for bad in [
            ("NCCL_IB_DISABLE", "1"),
            ("NCCL_NET", "Socket"),
            ("NCCL_IB_HCA", "mlx5_0,mlx5_1"),
            ("NCCL_IB_HCA", "^erdma"),
        ] {
            let f = env_finding(&env(&[bad]), &presets, None);
            assert_eq!(f.status, Status::Fail, "{bad:?}: {f:?}");
        }
        assert_eq!(
            env_finding(&env(&[]), &presets, None).message,
            "not set: NCCL_DEBUG NCCL_IB_HCA"
        );
    }

    #[test]
    fn nccl_before_2_21_is_a_warning_for_gids_by_address() {
        let lib = |v: &str| NcclFact {
            version: Nccl::parse(v).unwrap(),
            cuda: None,
            path: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
            package: Some(format!("libnccl2 {v}-1+cuda12.2")),
        };
        let facts = |v: &str| Facts { system_nccl: Some(lib(v)), ..Facts::default() };
        let f = &nccl_findings(&facts("2.20.5"), false)[0];
        assert_eq!(f.status, Status::Warn, "{f:?}");
        assert!(f.message.contains("NCCL_IB_GID_INDEX=-1"), "{f:?}");
        assert_eq!(f.hint.as_deref(), Some("erdma-build build --nccl latest"));
        assert_eq!(nccl_findings(&facts("2.21.5"), false)[0].status, Status::Ok);
        assert_eq!(nccl_findings(&facts("2.18.3"), false)[0].status, Status::Fail);
    }

    #[test]
    fn host_data_is_asked_for_only_by_the_profile() {
        let universal: Vec<(&str, &str)> = erdma_common::nccl::PRESETS.to_vec();
        let plain = crate::env_presets::for_profile(None);
        let pai = crate::env_presets::for_profile(Some(Profile::PaiDlc));
        // An image with the five universal presets is fine outside the profile...
        assert_eq!(env_finding(&env(&universal), &plain, None).status, Status::Ok);
        let ok = host_env_findings(&env(&universal), None);
        assert_eq!((ok.len(), ok[0].status), (1, Status::Ok));
        // ...and misses PAI-DLC's three inside it.
        let w = env_finding(&env(&universal), &pai, Some(Profile::PaiDlc));
        assert_eq!(
            (w.status, w.message.as_str()),
            (Status::Warn, "not set: NCCL_IB_GID_INDEX NCCL_IB_HCA NCCL_SOCKET_IFNAME")
        );
        assert!(w.hint.unwrap().contains("--profile pai-dlc"));

        // PAI-DLC's values baked in: a warning each outside the profile, what it expects inside.
        let mut baked = universal.clone();
        baked.extend(erdma_common::nccl::PAI_DLC_ENV);
        assert_eq!(
            env_finding(&env(&baked), &plain, None).status,
            Status::Ok,
            "the universal presets are all there"
        );
        let warns = host_env_findings(&env(&baked), None);
        assert_eq!(
            warns.iter().map(|f| (f.id.as_str(), f.status)).collect::<Vec<_>>(),
            [("nccl-host-env", Status::Warn); 3]
        );
        assert!(warns[0].message.starts_with("NCCL_SOCKET_IFNAME=eth0 is host data: on a host without eth0 every NCCL job stops at start"), "{warns:?}");
        assert!(warns[0].hint.as_deref().unwrap().starts_with(
            "leave it to erdma-oci-hook, which derives it per container, or set it at run time"
        ));
        assert!(warns[1].message.starts_with("NCCL_IB_HCA=erdma is host data"), "{warns:?}");
        assert!(warns[2].message.starts_with("NCCL_IB_GID_INDEX=1 is host data"), "{warns:?}");
        assert!(host_env_findings(&env(&baked), Some(Profile::PaiDlc)).is_empty());
        assert_eq!(env_finding(&env(&baked), &pai, Some(Profile::PaiDlc)).status, Status::Ok);
        // NCCL_IB_GID_INDEX=-1 lets NCCL choose: not host data.
        assert_eq!(
            host_env_findings(&env(&[("NCCL_IB_GID_INDEX", "-1")]), None)[0].status,
            Status::Ok
        );
    }
}
