//! MLNX_OFED-style packages: the builds a Mellanox OFED install leaves in an EL image.
use super::*;

/// MLNX_OFED 5.8-1.0.1.1 naming for RHEL 8 (assumed from the pattern NVIDIA uses, e.g.
/// `libibverbs-59mlnx44-1.59056` of MLNX_OFED 5.9, see the README): rdma-core packages get
/// version `58mlnx43`, release `1.58101`.
pub const OFED_RDMA_VERSION: &str = "58mlnx43";
pub const OFED_RDMA_RELEASE: &str = "1.58101";
/// Where `mlnxofedinstall` writes its local yum repository definition (unowned by any rpm).
pub const OFED_REPO_FILE: &str = "etc/yum.repos.d/mlnx_ofed.repo";
pub const OFED_REPO: &str = "[mlnx_ofed]\nname=MLNX_OFED Repository\nbaseurl=file:///tmp/MLNX_OFED_LINUX-5.8-1.0.1.1-rhel8.6-x86_64/RPMS\nenabled=1\ngpgkey=file:///tmp/MLNX_OFED_LINUX-5.8-1.0.1.1-rhel8.6-x86_64/RPM-GPG-KEY-Mellanox\ngpgcheck=1\n";

fn ofed_specs(extracted: &Path, debs: &[PathBuf]) -> Vec<SpecDef> {
    let x = if extracted == Path::new("/STAGE") {
        BTreeMap::new()
    } else {
        extract_debs(debs, extracted)
    };
    let get = |deb: &str, rel: &str| {
        x.get(deb).map(|d| d.join(rel)).unwrap_or_else(|| PathBuf::from("/STAGE").join(rel))
    };
    // Real ELF files under OFED-style names (libibverbs.so.1.14.58.0: rdma-core 58's numbering),
    // so that the soname Provides are real and a replacement can be told apart by file name.
    let ml = "usr/lib/x86_64-linux-gnu";
    let verbs = RpmDef {
        name: "libibverbs".into(),
        summary: "A library and drivers for direct userspace use of RDMA (MLNX_OFED-style)".into(),
        provides: vec![
            "libmlx5 = %{version}-%{release}".into(),
            "libmlx4 = %{version}-%{release}".into(),
        ],
        obsoletes: vec![
            "libmlx5 < %{version}-%{release}".into(),
            "libmlx4 < %{version}-%{release}".into(),
        ],
        dirs: vec!["/etc/libibverbs.d".into(), "/usr/lib64/libibverbs".into()],
        files: vec![
            (
                get("libibverbs1", &format!("{ml}/libibverbs.so.1.14.44.0")),
                "/usr/lib64/libibverbs.so.1.14.58.0".into(),
            ),
            (
                get("ibverbs-providers", &format!("{ml}/libmlx5.so.1.24.44.0")),
                "/usr/lib64/libmlx5.so.1.24.58.0".into(),
            ),
            (
                get("ibverbs-providers", &format!("{ml}/libibverbs/libmlx5-rdmav34.so")),
                "/usr/lib64/libibverbs/libmlx5-rdmav34.so".into(),
            ),
            (
                get("ibverbs-providers", "etc/libibverbs.d/mlx5.driver"),
                "/etc/libibverbs.d/mlx5.driver".into(),
            ),
        ],
        symlinks: vec![
            ("/usr/lib64/libibverbs.so.1".into(), "libibverbs.so.1.14.58.0".into()),
            ("/usr/lib64/libmlx5.so.1".into(), "libmlx5.so.1.24.58.0".into()),
        ],
        config: vec!["/etc/libibverbs.d/mlx5.driver".into()],
        scripts: "%post -n libibverbs -p /sbin/ldconfig\n%postun -n libibverbs -p /sbin/ldconfig\n"
            .into(),
        ..Default::default()
    };
    let isa_req = |n: &str| format!("{n}%{{?_isa}} = %{{version}}-%{{release}}");
    let rdma = SpecDef {
        name: "rdma-core".into(),
        version: OFED_RDMA_VERSION.into(),
        release: OFED_RDMA_RELEASE.into(),
        license: "GPLv2 or BSD".into(),
        packages: vec![
            RpmDef {
                name: "rdma-core".into(),
                summary: "RDMA core userspace libraries and daemons (MLNX_OFED-style)".into(),
                dirs: vec!["/etc/rdma".into(), "/etc/rdma/modules".into()],
                files: vec![(
                    get("rdma-core", "etc/rdma/modules/rdma.conf"),
                    "/etc/rdma/modules/rdma.conf".into(),
                )],
                config: vec!["/etc/rdma/modules/rdma.conf".into()],
                ..Default::default()
            },
            verbs,
            RpmDef {
                name: "libibverbs-utils".into(),
                summary: "Examples for the libibverbs library (MLNX_OFED-style)".into(),
                requires: vec![isa_req("libibverbs")],
                files: vec![
                    (get("ibverbs-utils", "usr/bin/ibv_devices"), "/usr/bin/ibv_devices".into()),
                    (get("ibverbs-utils", "usr/bin/ibv_devinfo"), "/usr/bin/ibv_devinfo".into()),
                ],
                ..Default::default()
            },
            RpmDef {
                name: "librdmacm".into(),
                summary: "Userspace RDMA Connection Manager (MLNX_OFED-style)".into(),
                requires: vec![isa_req("libibverbs")],
                files: vec![(
                    get("librdmacm1", &format!("{ml}/librdmacm.so.1.3.44.0")),
                    "/usr/lib64/librdmacm.so.1.3.58.0".into(),
                )],
                symlinks: vec![(
                    "/usr/lib64/librdmacm.so.1".into(),
                    "librdmacm.so.1.3.58.0".into(),
                )],
                scripts:
                    "%post -n librdmacm -p /sbin/ldconfig\n%postun -n librdmacm -p /sbin/ldconfig\n"
                        .into(),
                ..Default::default()
            },
        ],
    };
    let ofed_scripts = SpecDef {
        name: "ofed-scripts".into(),
        version: "5.8".into(),
        release: "OFED.5.8.1.0.1".into(),
        license: "GPLv2 or BSD".into(),
        packages: vec![RpmDef {
            name: "ofed-scripts".into(),
            summary: "OFED scripts (MLNX_OFED-style stand-in)".into(),
            contents: vec![
                (
                    "/usr/bin/ofed_info".into(),
                    b"#!/bin/sh\necho 'MLNX_OFED_LINUX-5.8-1.0.1.1 (OFED-5.8-1.0.1):'\n".to_vec(),
                    0o755,
                ),
                ("/etc/infiniband/info".into(), b"#!/bin/sh\necho prefix=/usr\n".to_vec(), 0o755),
            ],
            dirs: vec!["/etc/infiniband".into()],
            ..Default::default()
        }],
    };
    let kernel = SpecDef {
        name: "mlnx-ofa_kernel".into(),
        version: "5.8".into(),
        release: "OFED.5.8.1.0.1.1.rhel8u6".into(),
        license: "GPLv2".into(),
        packages: vec![RpmDef {
            name: "mlnx-ofa_kernel".into(),
            summary: "Infiniband HCA driver userspace part (MLNX_OFED-style stand-in)".into(),
            requires: vec!["ofed-scripts".into()],
            contents: vec![(
                "/etc/infiniband/openib.conf".into(),
                b"# MLNX_OFED-style stand-in\nONBOOT=yes\nRDMA_UCM_LOAD=yes\n".to_vec(),
                0o644,
            )],
            config: vec!["/etc/infiniband/openib.conf".into()],
            ..Default::default()
        }],
    };
    vec![rdma, ofed_scripts, kernel]
}

/// MLNX_OFED-style rpms (release 5.8 for RHEL 8): `rdma-core`, `libibverbs`, `libibverbs-utils`,
/// `librdmacm` at `58mlnx43-1.58101` (real Debian ELF files under OFED-style names, e.g.
/// `/usr/lib64/libibverbs.so.1.14.58.0`), `ofed-scripts-5.8-OFED.5.8.1.0.1`,
/// `mlnx-ofa_kernel-5.8-OFED.5.8.1.0.1.1.rhel8u6`. They need `libnl3` ([`el_deps_rpms`]).
pub fn ofed_like_rpms() -> Vec<PathBuf> {
    let names = ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1", "rdma-core"];
    let debs = real_debs(&names);
    let d2 = debs.clone();
    cached_rpms("el-rpms-ofed-el8", El::El8, move |x| ofed_specs(x, &d2), &debs)
}
