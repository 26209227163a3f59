//! What an image holds that decides whether eRDMA and NCCL will work in it: the RDMA user
//! space and where it came from, Mellanox OFED leftovers, CUDA, the system NCCL, the NCCL
//! that pip's `nvidia-nccl-cu*` wheels bundle, PyTorch, and Python. Read from the layers (see
//! [`ImageFiles`]); nothing is run. Used by `build` (NCCL's CUDA, the summary) and `check`.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Result;
use crate::packages::nccl::{self, Cuda, Nccl};
use erdma_oci::files::ImageFiles;
use erdma_oci::rootfs::SnapEntry;

/// The rdma-core packages whose builds must agree (`librdmacm1t64`: Debian 13, Ubuntu 24.04).
/// rdma-core's packages as Debian/Ubuntu (`libibverbs1`, …) and Enterprise Linux (rdma-core's
/// redhat/rdma-core.spec: `libibverbs`, …) name them.
pub const RDMA_PACKAGES: &[&str] = &[
    "libibverbs1",
    "ibverbs-providers",
    "librdmacm1",
    "librdmacm1t64",
    "ibverbs-utils",
    "libibverbs",
    "rdma-core",
    "librdmacm",
    "libibverbs-utils",
];

#[derive(Debug, Clone, Serialize)]
pub struct CudaFact {
    pub version: Cuda,
    /// `CUDA_VERSION` (the env NVIDIA's images set) or the file it was read from.
    pub source: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NcclFact {
    pub version: Nccl,
    /// The CUDA it was built for, when the library or package says.
    pub cuda: Option<Cuda>,
    pub path: String,
    /// The dpkg package and version that installed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Loads {
    /// The NCCL of a pip `nvidia-nccl-cu*` wheel beside torch (torch's RPATH points there).
    Python,
    /// The system's `libnccl.so.2` (torch built against it, as in NGC images).
    System,
}

#[derive(Debug, Clone, Serialize)]
pub struct TorchFact {
    pub path: String,
    /// Which NCCL it will load, when one is there.
    pub loads: Option<Loads>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Rdma {
    /// `/etc/libibverbs.d/erdma.driver` is there.
    pub erdma_driver: bool,
    /// The erdma provider library (`libibverbs/liberdma-rdmavNN.so`).
    pub erdma_provider: Option<String>,
    pub libibverbs: Option<String>,
    pub librdmacm: Option<String>,
    /// dpkg versions of the rdma-core packages installed.
    pub packages: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Facts {
    pub rdma: Rdma,
    /// Evidence of Mellanox OFED user space: packages and files.
    pub ofed: Vec<String>,
    pub cuda: Option<CudaFact>,
    pub system_nccl: Option<NcclFact>,
    pub python_nccl: Vec<NcclFact>,
    pub torch: Option<TorchFact>,
    pub python3: Option<String>,
}

impl Rdma {
    /// libibverbs with the erdma provider (its driver file and library).
    pub fn has_erdma(&self) -> bool {
        self.erdma_driver && self.erdma_provider.is_some() && self.libibverbs.is_some()
    }
}

impl Facts {
    /// The NCCL a training job will use: what PyTorch loads, else the system's, else pip's.
    pub fn effective_nccl(&self) -> Option<&NcclFact> {
        match self.torch.as_ref().and_then(|t| t.loads) {
            Some(Loads::Python) => self.python_nccl.first(),
            Some(Loads::System) => self.system_nccl.as_ref(),
            None => self.system_nccl.as_ref().or(self.python_nccl.first()),
        }
    }
}

/// The GNU triplet of a Debian architecture (multiarch library directories).
pub fn triplet(arch: &str) -> &'static str {
    match arch {
        "arm64" => "aarch64-linux-gnu",
        "armhf" => "arm-linux-gnueabihf",
        "ppc64el" => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        "i386" => "i386-linux-gnu",
        _ => "x86_64-linux-gnu",
    }
}

fn lib_dirs(arch: &str) -> Vec<String> {
    let t = triplet(arch);
    vec![format!("usr/lib/{t}"), "usr/lib64".into(), "usr/lib".into(), "usr/local/lib".into()]
}

fn is_file(files: &ImageFiles, path: &str) -> Result<bool> {
    Ok(matches!(files.kind(path)?, Some(SnapEntry::File(_))))
}

fn is_dir(files: &ImageFiles, path: &str) -> Result<bool> {
    Ok(matches!(files.kind(path)?, Some(SnapEntry::Dir)))
}

/// The first of `name` in the library directories.
fn find_lib(files: &ImageFiles, arch: &str, name: &str) -> Result<Option<String>> {
    for d in lib_dirs(arch) {
        let p = format!("{d}/{name}");
        if is_file(files, &p)? {
            return Ok(Some(format!("/{p}")));
        }
    }
    Ok(None)
}

/// The image's CUDA version: `CUDA_VERSION` in its env (NVIDIA's CUDA images set it), else
/// `/usr/local/cuda/version.json` (CUDA 11.1+), else `/usr/local/cuda/version.txt` (older).
pub fn cuda(files: &ImageFiles, env: &[(String, String)]) -> Result<Option<CudaFact>> {
    if let Some((_, v)) = env.iter().rev().find(|(k, _)| k == "CUDA_VERSION") {
        if let Some(c) = Cuda::parse(v) {
            return Ok(Some(CudaFact {
                version: c,
                source: "CUDA_VERSION in the image config".into(),
            }));
        }
    }
    if let Some(raw) = files.read("usr/local/cuda/version.json", 1 << 20)? {
        let v: Option<String> = serde_json::from_slice::<serde_json::Value>(&raw)
            .ok()
            .and_then(|j| j["cuda"]["version"].as_str().map(String::from));
        if let Some(c) = v.as_deref().and_then(Cuda::parse) {
            return Ok(Some(CudaFact {
                version: c,
                source: "/usr/local/cuda/version.json".into(),
            }));
        }
    }
    if let Some(raw) = files.read("usr/local/cuda/version.txt", 64 << 10)? {
        let text = String::from_utf8_lossy(&raw);
        if let Some(c) = text.trim().strip_prefix("CUDA Version ").and_then(Cuda::parse) {
            return Ok(Some(CudaFact { version: c, source: "/usr/local/cuda/version.txt".into() }));
        }
    }
    Ok(None)
}

/// The version a `libnccl.so` file carries, read as a stream.
fn library_nccl(files: &ImageFiles, path: &str) -> Result<Option<(Nccl, Option<Cuda>)>> {
    let mut found = None;
    files.scan(path, &mut |r, _| {
        found = nccl::version_in_library(r)?;
        Ok(Vec::new())
    })?;
    Ok(found)
}

/// `site-packages`/`dist-packages` directories of the Python 3 installations in the image.
fn site_dirs(files: &ImageFiles) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for prefix in ["usr/local/lib", "usr/lib", "opt/conda/lib"] {
        for name in files.list_all(prefix)? {
            if !name.starts_with("python3") {
                continue;
            }
            for site in ["site-packages", "dist-packages"] {
                let d = format!("{prefix}/{name}/{site}");
                if is_dir(files, &d)? {
                    out.push(d);
                }
            }
        }
    }
    Ok(out)
}

/// `KEY=VALUE` pairs of an image config's `config.Env`.
pub fn env_of(config: &serde_json::Value) -> Vec<(String, String)> {
    erdma_oci::config::env_list(config)
        .into_iter()
        .filter_map(|e| e.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

pub fn facts(files: &ImageFiles, arch: &str, env: &[(String, String)]) -> Result<Facts> {
    let mut f = Facts::default();
    let dpkg = crate::packages::installed(files)?;

    f.rdma.erdma_driver = is_file(files, "etc/libibverbs.d/erdma.driver")?;
    for d in lib_dirs(arch) {
        let dir = format!("{d}/libibverbs");
        if let Some(lib) = files
            .list(&dir)?
            .into_iter()
            .find(|n| n.starts_with("liberdma-rdmav") && n.ends_with(".so"))
        {
            f.rdma.erdma_provider = Some(format!("/{dir}/{lib}"));
            break;
        }
    }
    f.rdma.libibverbs = find_lib(files, arch, "libibverbs.so.1")?;
    f.rdma.librdmacm = find_lib(files, arch, "librdmacm.so.1")?;
    f.rdma.packages = RDMA_PACKAGES
        .iter()
        .filter_map(|p| dpkg.get(*p).map(|v| (p.to_string(), v.clone())))
        .collect();

    // MLNX_OFED / DOCA builds carry `mlnx` in their versions (`2307mlnx47-1.2310036`); its
    // own packages and tools have telling names.
    for (name, version) in &dpkg {
        let v = version.to_ascii_lowercase();
        if v.contains("mlnx")
            || v.contains("ofed")
            || name.starts_with("mlnx-")
            || name == "ofed-scripts"
            || name.starts_with("doca-")
        {
            f.ofed.push(format!("package {name} {version}"));
        }
    }
    for path in [
        "etc/apt/sources.list.d/mellanox_mlnx_ofed.list",
        "etc/yum.repos.d/mlnx_ofed.repo",
        "usr/bin/ofed_info",
    ] {
        if files.kind(path)?.is_some() {
            f.ofed.push(format!("/{path}"));
        }
    }

    f.cuda = cuda(files, env)?;

    // System NCCL: dpkg's libnccl2 (NVIDIA's package version names the CUDA build), else a
    // libnccl.so.2 in the library directories.
    if let Some(lib) = find_lib(files, arch, "libnccl.so.2")? {
        let from_lib = library_nccl(files, lib.trim_start_matches('/'))?;
        let from_pkg =
            dpkg.get("libnccl2").and_then(|v| nccl::parse_build(v).map(|b| (v.clone(), b)));
        let fact = match (from_lib, from_pkg) {
            (Some((n, c)), pkg) => Some(NcclFact {
                version: n,
                cuda: c.or(pkg.as_ref().map(|p| p.1 .1)),
                path: lib.clone(),
                package: pkg.map(|p| format!("libnccl2 {}", p.0)),
            }),
            (None, Some((v, (n, c)))) => Some(NcclFact {
                version: n,
                cuda: Some(c),
                path: lib.clone(),
                package: Some(format!("libnccl2 {v}")),
            }),
            (None, None) => None,
        };
        f.system_nccl = fact;
    }

    for site in site_dirs(files)? {
        let lib = format!("{site}/nvidia/nccl/lib/libnccl.so.2");
        if is_file(files, &lib)? {
            if let Some((n, c)) = library_nccl(files, &lib)? {
                f.python_nccl.push(NcclFact {
                    version: n,
                    cuda: c,
                    path: format!("/{lib}"),
                    package: None,
                });
            }
        }
        if f.torch.is_none() && is_file(files, &format!("{site}/torch/__init__.py"))? {
            // pip's torch wheels find NCCL through their RPATH in the same site directory;
            // a torch without that wheel beside it (NGC's, built from source) links the system's.
            let beside = f.python_nccl.iter().any(|p| p.path.starts_with(&format!("/{site}/")));
            let loads = if beside {
                Some(Loads::Python)
            } else {
                f.system_nccl.as_ref().map(|_| Loads::System)
            };
            f.torch = Some(TorchFact { path: format!("/{site}/torch"), loads });
        }
    }

    for p in ["usr/bin/python3", "usr/local/bin/python3", "opt/conda/bin/python3"] {
        if is_file(files, p)? {
            f.python3 = Some(format!("/{p}"));
            break;
        }
    }
    Ok(f)
}

/// The rdma-core packages' versions when they are not all one build, else `None`.
pub fn mixed_rdma_builds(rdma: &Rdma) -> Option<String> {
    let mut versions: Vec<&String> = rdma.packages.values().collect();
    versions.sort();
    versions.dedup();
    (versions.len() > 1).then(|| {
        rdma.packages.iter().map(|(p, v)| format!("{p} {v}")).collect::<Vec<_>>().join(", ")
    })
}
