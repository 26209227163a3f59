//! Command-line arguments, kept apart from the resolved [`crate::build::Options`].
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::build::Options;
use crate::error::Result;
use crate::packages::nccl::Want;
use erdma_oci::layer::LayerCompression;
use erdma_oci::source::{Platform, PlatformChoice};
use erdma_oci::transport::ImageRef;

/// `NAME=FILE` of `--keyring`: a repository name (letters, digits, `-`, `_`) before the `=`.
fn named(k: &str) -> Option<(&str, &str)> {
    let (n, f) = k.split_once('=')?;
    (!n.is_empty()
        && !f.is_empty()
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    .then_some((n, f))
}

#[derive(Debug, Parser)]
#[command(
    name = "erdma-build",
    version = env!("ERDMA_VERSION"),
    about = "Add Alibaba Cloud eRDMA user space to container images, without a daemon or root",
    long_about = "Add Alibaba Cloud eRDMA user space to container images, without a daemon or root.\n\n\
Images are named as skopeo names them:\n  \
docker://REGISTRY/REPO[:TAG|@DIGEST]   a registry (HTTPS; plain HTTP too for loopback and --insecure-registry)\n  \
oci:DIR[:TAG]                          an OCI image layout\n  \
oci-archive:FILE[:TAG]                 a tar of an OCI image layout\n  \
docker-archive:FILE[:NAME:TAG]         what `docker save` writes and `docker load` reads"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// No progress bars or step messages.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Print the result as JSON on stdout.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a new image from BASE with the eRDMA layer added, and write it to OUTPUT.
    Build(BuildArgs),
    /// Show what `build` would do (files added, env set, layers reused) without writing anything.
    Plan(PlanArgs),
    /// Tell whether IMAGE is ready for eRDMA training: RDMA user space, no Mellanox OFED, NCCL,
    /// CUDA, Python and the NCCL env. Exit 0 when ready, 1 when not.
    Check(CheckArgs),
    /// List the built-in distribution recipes.
    Recipes,
    /// Write erdma-build's own container image: the static programs given, CA certificates
    /// and a non-root user, one layer per platform under one index (scripts/dist runs it).
    SelfImage(SelfImageArgs),
}

#[derive(Debug, Args)]
pub struct SelfImageArgs {
    /// PLATFORM=FILE: the static erdma-build for linux/amd64 or linux/arm64. Repeatable, one
    /// per platform.
    #[arg(long = "binary", value_name = "PLATFORM=FILE", required = true)]
    pub binaries: Vec<String>,
    /// The CA certificates (a PEM bundle) the image trusts, e.g. Debian's
    /// /etc/ssl/certs/ca-certificates.crt.
    #[arg(long, value_name = "FILE")]
    pub ca_certs: PathBuf,
    /// A label of the image config (org.opencontainers.image.version=…). Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// Where to write it: docker://, oci: or oci-archive: (it is an index).
    #[arg(long, short)]
    pub output: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

impl SelfImageArgs {
    pub fn options(&self) -> Result<crate::self_image::Options> {
        let bad = |what: &str, v: &str, want: &str| crate::error::Error::Malformed {
            what: "argument",
            reference: format!("{what} {v}"),
            reason: format!("expected {want}").into(),
        };
        let binaries = self
            .binaries
            .iter()
            .map(|b| match b.split_once('=') {
                Some((p, f)) if !p.is_empty() && !f.is_empty() => {
                    Ok((p.to_string(), PathBuf::from(f)))
                }
                _ => Err(bad("--binary", b, "PLATFORM=FILE")),
            })
            .collect::<Result<_>>()?;
        let labels = self
            .labels
            .iter()
            .map(|l| match l.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                _ => Err(bad("--label", l, "KEY=VALUE")),
            })
            .collect::<Result<_>>()?;
        Ok(crate::self_image::Options {
            binaries,
            ca_certs: self.ca_certs.clone(),
            labels,
            output: ImageRef::parse(&self.output)?,
            registry: self.registry.options(),
            epoch: crate::build::Options::epoch_from_env(),
        })
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The image to check, e.g. docker://registry/pytorch:24.05 or oci:DIR:TAG.
    pub image: String,
    /// Add a platform's requirements: `pai-dlc` (CUDA 12.1 or later, NCCL 2.19 or later, Python 3,
    /// and PAI-DLC's NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_IB_GID_INDEX in the env).
    #[arg(long, value_enum)]
    pub profile: Option<crate::env_presets::Profile>,
    /// os/arch[/variant] to check in a multi-platform image [default: the host's platform].
    #[arg(long)]
    pub platform: Option<String>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// How registries are reached: build, plan and check.
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Skip certificate checks for this registry (HOST or HOST:PORT), and use plain HTTP where it
    /// does not speak HTTPS (as loopback registries may). Repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST")]
    pub insecure_registries: Vec<String>,
    // clap's help text, not Markdown: `HOST[:PORT]` is no link.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// Read CA certificates (*.crt) and a client certificate (*.cert with its *.key) for every
    /// registry from DIR, instead of HOST[:PORT]/ under ~/.config/containers/certs.d,
    /// /etc/containers/certs.d and /etc/docker/certs.d.
    #[arg(long = "cert-dir", value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,
}

impl RegistryArgs {
    pub fn options(&self) -> erdma_oci::registry::RegistryOptions {
        erdma_oci::registry::RegistryOptions {
            insecure: self.insecure_registries.clone(),
            cert_dir: self.cert_dir.clone(),
        }
    }
}

/// What a hostile base image or repository may cost (`limits`): build, plan and check.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Refuse a base image of more than N layers (before any is read). Docker runs images of
    /// at most 125.
    #[arg(long, value_name = "N", default_value_t = erdma_limits::DEFAULT_LAYERS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_layers: u64,
    /// Refuse a base layer, package payload, Packages index or repository metadata file that
    /// decompresses to more than N times its compressed size (after the first 64 MiB): a
    /// decompression bomb. 0 lifts the limit.
    #[arg(long, value_name = "N", default_value_t = erdma_limits::DEFAULT_INFLATION)]
    pub max_inflation: u64,
    /// Refuse a base whose layers read hold more than N tar entries in all (files,
    /// directories, links, whiteouts; about 170 bytes of memory each).
    #[arg(long, value_name = "N", default_value_t = erdma_limits::DEFAULT_ENTRIES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_entries: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> erdma_limits::Limits {
        erdma_limits::Limits {
            layers: usize::try_from(self.max_layers).unwrap_or(usize::MAX),
            inflation: self.max_inflation,
            entries: self.max_entries,
        }
    }
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Where to write the new image, e.g. docker://registry/repo:tag or oci:out:demo.
    #[arg(long, short)]
    pub output: String,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Download the packages too (into the cache, verified as a build verifies them) to list
    /// their setuid and setgid files and device nodes; without it, only the packages already
    /// on disk (--package files, the cache) are read.
    #[arg(long)]
    pub download: bool,
}

impl PlanArgs {
    pub fn resolve(&self) -> Result<Options> {
        Ok(Options { download: self.download, ..self.common.resolve()? })
    }
}

#[derive(Debug, Args)]
pub struct CommonArgs {
    /// The image to start from, e.g. docker://registry/pytorch:24.05 or oci:DIR:TAG.
    #[arg(long, short)]
    pub base: String,
    /// os/arch[/variant] to take from a multi-platform base, or `all` to build every platform
    /// and write a new index [default: the host's platform].
    #[arg(long)]
    pub platform: Option<String>,
    /// Recipe name (see `erdma-build recipes`) or path to a recipe file [default: detected from
    /// the base's /etc/os-release].
    #[arg(long)]
    pub recipe: Option<String>,
    /// Set an environment variable in the image config, replacing the base's value (repeatable).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Add none of the env presets (erdma-build's NCCL tuning, a recipe's `[env]`); --env still
    /// applies.
    #[arg(long)]
    pub no_env_presets: bool,
    /// Bake a platform's host-specific NCCL settings into the image too: `pai-dlc` adds
    /// NCCL_SOCKET_IFNAME=eth0, NCCL_IB_HCA=erdma and NCCL_IB_GID_INDEX=1 (PAI-DLC's hosts have
    /// eth0 and erdma_N devices and run no hook). Without it the image carries none of them: on
    /// other hosts they break NCCL, and erdma-oci-hook derives them per container.
    #[arg(long, value_enum, conflicts_with = "no_env_presets")]
    pub profile: Option<crate::env_presets::Profile>,
    /// Compression of the new layer.
    #[arg(long, value_enum, default_value_t = LayerCompression::Gzip)]
    pub compression: LayerCompression,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// OpenPGP key file to trust instead of the recipe's key URL or the base image's keys
    /// (mirrors, air-gapped sites): FILE for every repository read, or NAME=FILE for one
    /// (`base` is the base image's own archive, `cuda` NVIDIA's). Repeatable.
    #[arg(long = "keyring", value_name = "[NAME=]FILE")]
    pub keyrings: Vec<String>,
    /// Archive URL to read instead of the ones the base image is configured with (recipes
    /// using the base's archive: Debian 12+, Ubuntu 24.04+): URL stands in for every source
    /// (main, -updates, -security), FROM=URL for the sources at FROM only. Repeatable. A base
    /// without apt sources needs it.
    #[arg(long = "mirror", value_name = "[FROM=]URL")]
    pub mirrors: Vec<String>,
    /// Replace a recipe repository's URL, e.g. `--repo erdma=https://mirror.example/erdma/apt/ubuntu`;
    /// for rpm images also one of the base's own repositories by its id (`--repo baseos=URL`).
    #[arg(long = "repo", value_name = "NAME=URL")]
    pub repos: Vec<String>,
    /// Install NAME too (or exactly VERSION of it), from the same repositories, resolved and
    /// verified like the recipe's packages: e.g. perftest, rdmacm-utils, infiniband-diags.
    /// Recommends are not installed (as apt-get install --no-install-recommends, the norm in
    /// Dockerfiles) unless --install-recommends; the report lists those left out. Maintainer
    /// scripts that cannot be emulated run in a sandbox (see --no-sandbox). Repeatable.
    #[arg(long = "install", value_name = "NAME[=VERSION]")]
    pub install: Vec<String>,
    /// Install the Recommends of the packages installed too, as `apt-get install` and dnf
    /// (`install_weak_deps=True`) do by default: the first installable alternative of each,
    /// and theirs in turn.
    #[arg(long)]
    pub install_recommends: bool,
    /// Install a .deb that no repository signs (a file, or an http(s) URL), its dependencies
    /// from the repositories; needs --allow-unsigned-package. Repeatable.
    #[arg(long = "package", value_name = "FILE|URL")]
    pub packages: Vec<String>,
    /// Accept --package files without a signature; they are listed in the report and in the
    /// image label com.alibabacloud.erdma.unsigned-packages.
    #[arg(long)]
    pub allow_unsigned_package: bool,
    /// Build even where a package's maintainer script (rpm: scriptlet) can be neither emulated
    /// nor shown to be without effect: it is not run, and the report lists it. Without this
    /// flag such scripts run in a sandbox (apt), or the build stops (--no-sandbox, rpm).
    #[arg(long)]
    pub skip_scripts: bool,
    /// Never read the base's layers to run maintainer scripts: emulate them, or stop before
    /// writing anything where a script can be neither emulated nor shown to be without effect.
    /// By default such scripts run as dpkg runs them, inside a sandbox over the base's root
    /// (its own user, mount, PID and network namespaces; needs root here).
    #[arg(long, conflicts_with = "skip_scripts")]
    pub no_sandbox: bool,
    /// Install none of the recipe's eRDMA packages; add only its repository configuration,
    /// files and the env presets (and NCCL with --nccl).
    #[arg(long)]
    pub no_packages: bool,
    /// Add NVIDIA's NCCL (`libnccl2`) from the CUDA repository for the base's distribution:
    /// `latest`, a release such as `2.21.5`, or a package version such as `2.21.5-1+cuda12.4`.
    /// The build for the base's CUDA major version is taken; releases before 2.19 are refused.
    #[arg(long, value_name = "VERSION", num_args = 0..=1, default_missing_value = "latest")]
    pub nccl: Option<String>,
    /// With --nccl: add `libnccl-dev` (headers, static library) too.
    #[arg(long, requires = "nccl")]
    pub nccl_dev: bool,
    /// With --nccl: the CUDA version (X.Y) to take the NCCL build for, when the base has no
    /// CUDA_VERSION or /usr/local/cuda/version.json (or to override them).
    #[arg(long, value_name = "X.Y", requires = "nccl")]
    pub cuda: Option<String>,
    /// Seconds a repository, key or package server may send nothing before the transfer is
    /// given up (and retried, 3 times): a stalled mirror fails the build in about
    /// 4 × SECS + 4 s per file instead of hanging it.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub read_timeout: u64,
    #[command(flatten)]
    pub limits: LimitArgs,
}

impl CommonArgs {
    pub fn resolve(&self) -> Result<Options> {
        if !self.packages.is_empty() && !self.allow_unsigned_package {
            return Err(crate::Error::UnsignedPackage {
                path: self.packages[0].clone(),
                label: crate::build::UNSIGNED_LABEL,
            });
        }
        for i in &self.install {
            let name = i.split_once('=').map_or(i.as_str(), |(n, _)| n);
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
            {
                return Err(crate::Error::Usage {
                    option: "--install",
                    value: i.clone(),
                    expected: "a package name (lowercase letters, digits, + - .) with an optional =VERSION",
                });
            }
        }
        let platform = match self.platform.as_deref() {
            None => PlatformChoice::One(Platform::host()),
            Some("all") => PlatformChoice::All,
            Some(p) => PlatformChoice::One(Platform(p.to_string())),
        };
        Ok(Options {
            base: ImageRef::parse(&self.base)?,
            platform,
            recipe: self.recipe.clone(),
            env: self
                .env
                .iter()
                .map(|e| erdma_oci::config::parse_env(e))
                .collect::<erdma_oci::Result<_>>()?,
            env_presets: !self.no_env_presets,
            profile: self.profile,
            compression: self.compression,
            registry: self.registry.options(),
            keyring: self.keyrings.iter().rfind(|k| named(k).is_none()).map(PathBuf::from),
            repo_keyrings: self
                .keyrings
                .iter()
                .filter_map(|k| named(k))
                .map(|(n, f)| (n.to_string(), PathBuf::from(f)))
                .collect(),
            nccl: self.nccl.as_deref().map(Want::parse).transpose()?,
            nccl_dev: self.nccl_dev,
            cuda: match &self.cuda {
                Some(c) => Some(
                    crate::packages::nccl::Cuda::parse(c)
                        .filter(|_| c.trim().split('.').count() <= 3)
                        .ok_or_else(|| crate::Error::Usage {
                            option: "--cuda",
                            value: c.clone(),
                            expected: "a version such as 12.4",
                        })?,
                ),
                None => None,
            },
            mirrors: self.mirrors.iter().map(|m| crate::packages::Mirror::parse(m)).collect(),
            repo_urls: self
                .repos
                .iter()
                .map(|r| match r.split_once('=') {
                    Some((n, u)) if !n.is_empty() && !u.is_empty() => {
                        Ok((n.to_string(), u.to_string()))
                    }
                    _ => Err(crate::Error::Usage {
                        option: "--repo",
                        value: r.clone(),
                        expected: "NAME=URL",
                    }),
                })
                .collect::<Result<_>>()?,
            packages: !self.no_packages,
            install: self.install.clone(),
            local_packages: self.packages.clone(),
            epoch: Options::epoch_from_env(),
            timeouts: erdma_http::Timeouts {
                read: std::time::Duration::from_secs(self.read_timeout),
                ..Default::default()
            },
            limits: self.limits.limits(),
            download: false,
            skip_scripts: self.skip_scripts,
            sandbox: !self.no_sandbox,
            install_recommends: self.install_recommends,
        })
    }
}
