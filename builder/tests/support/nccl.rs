//! NVIDIA-style NCCL packages and repositories for the NCCL and `check` tests, and base images
//! with CUDA, Python and PyTorch markers.
//!
//! NVIDIA's real `libnccl2` holds a several-hundred-MiB `libnccl.so.2.X.Y`; the stand-ins here
//! carry only what a reader of the library looks at: NCCL's version string, as the real
//! library has it in `.rodata` (`NCCL version 2.21.5+cuda12.4`, printed at `ncclCommInit`).
use std::path::{Path, PathBuf};

use super::apt_repo::{AptRepo, Layout, TestKey};
use super::debs::{fake_deb, FakeDeb};
use super::fixture::{self, OciFixture};

/// Where NVIDIA serves the CUDA repository for Debian 12, below the host.
pub const CUDA_REPO_PATH: &str = "compute/cuda/repos/debian12/x86_64";

/// The builds in [`nvidia_repo`]: old ones, one per CUDA major, and several CUDA 12 minors.
pub const NVIDIA_BUILDS: &[&str] = &[
    "2.18.3-1+cuda12.2",
    "2.18.5-1+cuda11.0",
    "2.21.5-1+cuda11.8",
    "2.21.5-1+cuda12.2",
    "2.21.5-1+cuda12.4",
    "2.27.7-1+cuda13.0",
];

const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

/// A stand-in `libnccl.so` carrying NCCL's version string between other bytes.
pub fn library_bytes(nccl: &str, cuda: &str) -> Vec<u8> {
    let mut b = b"\x7fELF stand-in for libnccl (TEST ONLY)\0".to_vec();
    b.extend(std::iter::repeat_n(0u8, 4096));
    b.extend_from_slice(format!("NCCL version {nccl}+cuda{cuda}\0").as_bytes());
    b.extend(std::iter::repeat_n(0x5au8, 4096));
    b
}

/// `libnccl2` and `libnccl-dev` of `version` (`2.21.5-1+cuda12.4`), laid out as NVIDIA's.
pub fn nccl_debs(dir: &Path, version: &str) -> Vec<PathBuf> {
    let (upstream, rest) = version.split_once('-').expect("NVIDIA version");
    let cuda = rest.split_once("+cuda").expect("+cudaX.Y").1;
    let lib = library_bytes(upstream, cuda);
    let so = format!("{LIB_DIR}/libnccl.so.{upstream}");
    let so_name = format!("libnccl.so.{upstream}");
    let mut parts = upstream.split('.');
    let header = format!(
        "#define NCCL_MAJOR {}\n#define NCCL_MINOR {}\n#define NCCL_PATCH {}\n",
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap()
    );
    let runtime = fake_deb(
        dir,
        FakeDeb {
            name: "libnccl2",
            version,
            description: Some(
                "NVIDIA Collective Communication Library (NCCL) Runtime (TEST ONLY stand-in)",
            ),
            files: vec![
                (&so, &lib, 0o644),
                (&format!("{LIB_DIR}/libnccl.so.2"), so_name.as_bytes(), 0o120777),
            ],
            ..Default::default()
        },
    );
    let depends = format!("libnccl2 (= {version})");
    let dev = fake_deb(
        dir,
        FakeDeb {
            name: "libnccl-dev",
            version,
            depends: Some(&depends),
            description: Some("NVIDIA Collective Communication Library (NCCL) Development Files (TEST ONLY stand-in)"),
            files: vec![("/usr/include/nccl.h", header.as_bytes(), 0o644), (&format!("{LIB_DIR}/libnccl.so"), b"libnccl.so.2", 0o120777)],
            ..Default::default()
        },
    );
    vec![runtime, dev]
}

/// A signed flat repository at `…/compute/cuda/repos/debian12/x86_64/` holding
/// [`NVIDIA_BUILDS`] (plus `extra` builds), as NVIDIA lays out its CUDA repositories.
pub fn nvidia_repo(dir: &Path, key: &TestKey, extra: &[&str]) -> AptRepo {
    let mut debs = Vec::new();
    for v in NVIDIA_BUILDS.iter().chain(extra) {
        debs.extend(nccl_debs(dir, v));
    }
    AptRepo::build_under(CUDA_REPO_PATH, Layout::Flat, &debs, key)
}

/// What to put on top of a base for the NCCL and `check` tests.
#[derive(Default)]
pub struct Extras<'a> {
    pub cuda: Option<&'a str>,
    pub cuda_in_env: bool,
    /// A `python3` in `/usr/bin` (a stand-in script).
    pub python3: bool,
    /// pip's `nvidia-nccl-cuXX` wheel of this NCCL (`2.18.1+cuda12.1`) in site-packages.
    pub pip_nccl: Option<(&'a str, &'a str)>,
    /// A pip PyTorch in site-packages (it loads the pip NCCL beside it).
    pub torch: bool,
    /// Stand-ins of libibverbs with the erdma provider (as a base that has them already).
    pub erdma_userspace: bool,
    pub env: Vec<(&'a str, &'a str)>,
}

/// `base` (every layer of it) plus one layer with `extras`, tagged `tag` in the layout `dir`.
pub fn extend(base: &OciFixture, dir: &Path, tag: &str, extras: &Extras<'_>) -> OciFixture {
    let mut layers: Vec<fixture::LayerInfo> =
        (0..base.layers.len()).map(|i| fixture::import_layer(base, i, dir)).collect();
    let site = "usr/local/lib/python3.11/dist-packages";
    let mut files: Vec<(String, Vec<u8>, u32)> = Vec::new();
    let mut env: Vec<(String, String)> = fixture::env_of(base);
    if let Some(c) = extras.cuda {
        let short: String = c.split('.').take(2).collect::<Vec<_>>().join(".");
        if extras.cuda_in_env {
            env.push(("CUDA_VERSION".into(), c.into()));
        } else {
            files.push((
                format!("usr/local/cuda-{short}/version.json"),
                format!("{{\"cuda\": {{\"name\": \"CUDA SDK\", \"version\": \"{c}\"}}}}\n")
                    .into_bytes(),
                0o644,
            ));
            files.push(("usr/local/cuda".into(), format!("cuda-{short}").into_bytes(), 0o120777));
        }
    }
    if extras.python3 {
        files.push((
            "usr/bin/python3.11".into(),
            b"#!/bin/sh\necho 'Python 3.11 stand-in (TEST ONLY)'\n".to_vec(),
            0o755,
        ));
        files.push(("usr/bin/python3".into(), b"python3.11".to_vec(), 0o120777));
    }
    if let Some((nccl, cuda)) = extras.pip_nccl {
        files.push((
            format!("{site}/nvidia/nccl/lib/libnccl.so.2"),
            library_bytes(nccl, cuda),
            0o644,
        ));
        files.push((
            format!("{site}/nvidia_nccl_cu12-{nccl}.dist-info/METADATA"),
            format!("Name: nvidia-nccl-cu12\nVersion: {nccl}\n").into_bytes(),
            0o644,
        ));
    }
    if extras.torch {
        files.push((
            format!("{site}/torch/__init__.py"),
            b"# PyTorch stand-in (TEST ONLY)\n".to_vec(),
            0o644,
        ));
        files.push((format!("{site}/torch/lib/libtorch_cuda.so"), b"stand-in".to_vec(), 0o644));
    }
    if extras.erdma_userspace {
        files.push(("etc/libibverbs.d/erdma.driver".into(), b"driver erdma\n".to_vec(), 0o644));
        files.push((
            format!("{}/libibverbs/liberdma-rdmav34.so", &LIB_DIR[1..]),
            b"stand-in".to_vec(),
            0o644,
        ));
        files.push((
            format!("{}/libibverbs.so.1.14.44.0", &LIB_DIR[1..]),
            b"stand-in".to_vec(),
            0o644,
        ));
        files.push((
            format!("{}/libibverbs.so.1", &LIB_DIR[1..]),
            b"libibverbs.so.1.14.44.0".to_vec(),
            0o120777,
        ));
        files.push((format!("{}/librdmacm.so.1", &LIB_DIR[1..]), b"stand-in".to_vec(), 0o644));
    }
    for (k, v) in &extras.env {
        env.push((k.to_string(), v.to_string()));
    }
    let entries: Vec<fixture::Entry<'_>> =
        files.iter().map(|(p, c, m)| (p.as_str(), c.as_slice(), *m)).collect();
    layers.push(fixture::entries_layer(dir, &entries));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    fixture::image_from_layers(dir, tag, layers, &env, &["/bin/sh"])
}
