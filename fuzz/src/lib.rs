//! Fuzz targets: every parser of input erdma-kit does not control, each a function of bytes that
//! must return (an error is fine) and never panic, hang or allocate without bound.
//!
//! One list, [`TARGETS`], used three ways:
//! - `scripts/fuzz [SECONDS]` runs each under libFuzzer, coverage-guided (`fuzz/libfuzzer/`);
//! - `erdma-fuzz` (this crate's binary) mutates the seeds on stable Rust without coverage, for
//!   machines where the libFuzzer build is not possible;
//! - `tests/regressions.rs` runs each on its seeds and on every input that once made it fail
//!   (`fuzz/regressions/TARGET/`), in the normal test run.
//!
//! Seeds are the real files the tests already use (`fuzz/seeds/TARGET/`, and paths in
//! `testdata/`), listed per target in [`Target::seeds`].
#![forbid(unsafe_code)]
use std::io::{BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use erdma_deb::{deb, deb822, repo, version as debver};
use erdma_openpgp as openpgp;
use erdma_rpm::{self as rpm, header::Header, package as rpmpkg, repodata, version as rpmver};

/// xorshift64: the fuzzer's and the property tests' generator, the same sequence for the same
/// seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// One parser under test.
pub struct Target {
    pub name: &'static str,
    /// What input it stands for, for the report.
    pub input: &'static str,
    pub run: fn(&[u8]),
    /// Seed files and directories, relative to the repository root.
    pub seeds: &'static [&'static str],
}

/// The repository root (this crate is `fuzz/` in it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("fuzz/ has a parent").to_path_buf()
}

/// Every seed input of `t`: the files named, and the files in the directories named (not
/// recursing), each at most 4 MiB.
pub fn seeds(t: &Target) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |p: PathBuf| {
        if let Ok(m) = std::fs::metadata(&p) {
            if m.is_file() && m.len() <= 4 << 20 {
                if let Ok(b) = std::fs::read(&p) {
                    out.push((p, b));
                }
            }
        }
    };
    for s in t.seeds.iter().chain(std::iter::once(&"")) {
        let p = if s.is_empty() { root().join("fuzz/seeds").join(t.name) } else { root().join(s) };
        if p.is_dir() {
            let mut entries: Vec<PathBuf> =
                std::fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()).collect();
            entries.sort();
            entries.into_iter().for_each(&mut add);
        } else {
            add(p);
        }
    }
    out
}

pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// A scratch file for parsers that read paths (`.deb`, `.rpm`, engine configs): one per thread,
/// rewritten for each input.
fn scratch(name: &str, data: &[u8]) -> PathBuf {
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::Builder::new().prefix("erdma-fuzz-").tempdir().expect("a temp dir");
    }
    DIR.with(|d| {
        let p = d.path().join(name);
        std::fs::write(&p, data).expect("writing the scratch file");
        p
    })
}

/// The test-only key the demo repository is signed with.
fn demo_keyring() -> &'static [u8] {
    static K: OnceLock<Vec<u8>> = OnceLock::new();
    K.get_or_init(|| {
        std::fs::read(root().join("testdata/repos/debian-demo/demo-key.asc")).unwrap_or_default()
    })
}

fn t_deb822(data: &[u8]) {
    let s = text(data);
    if let Ok(ps) = deb822::parse(&s) {
        for p in &ps {
            for (k, v) in p.fields() {
                let _ = (k.len(), v.len());
            }
        }
    }
    for p in deb822::paragraphs(&s).take(10_000) {
        let _ = p;
    }
}

/// A registry's `WWW-Authenticate` values (one per line, up to an empty line), then its token
/// service's reply.
fn t_registry_auth(data: &[u8]) {
    let s = text(data);
    let (head, body) = s.split_once("\n\n").unwrap_or((&s, ""));
    if let Some(c) = erdma_oci::auth::bearer_challenge(head.lines()) {
        let _ = (c.realm.len(), c.service.map(|s| s.len()));
    }
    if let Ok(t) = erdma_oci::auth::token_reply(body.as_bytes()) {
        let _ = (t.token.len(), t.expires_in);
    }
}

fn t_debian_version(data: &[u8]) {
    let s = text(data);
    // Two versions split at the first newline: parsing each, and comparing them both ways
    // (antisymmetry is a property test's, in tests/properties.rs; here: no panic).
    let (a, b) = s.split_once('\n').unwrap_or((&s, "1.0"));
    if let (Ok(x), Ok(y)) = (a.parse::<debver::Version>(), b.parse::<debver::Version>()) {
        let _ = (x.cmp(&y), y.cmp(&x), x.syntax_warning());
    }
    let _ = debver::parse_relations(&s);
}

fn t_release_signed(data: &[u8]) {
    let _ = repo::verify_clearsigned(data, demo_keyring());
}

fn t_openpgp_keys(data: &[u8]) {
    let _ = openpgp::parse(data);
    let _ = openpgp::dearmor(data);
    let _ = openpgp::select(data, Some("0123456789ABCDEF0123456789ABCDEF01234567"), "fuzz");
}

fn t_deb(data: &[u8]) {
    let p = scratch("x.deb", data);
    let _ = deb::read_control(&p);
    let mut budget = 100_000usize;
    let _ = deb::for_each_data_entry(&p, erdma_limits::DEFAULT_INFLATION, |_entry, r| {
        budget = budget.saturating_sub(1);
        if budget == 0 {
            return Err(deb::DebError::Malformed {
                path: p.clone(),
                reason: "fuzz: entry budget".into(),
            });
        }
        let _ = std::io::copy(&mut r.take(1 << 20), &mut std::io::sink());
        Ok(())
    });
}

fn t_rpm_header(data: &[u8]) {
    if let Ok(h) = Header::parse(data.to_vec()) {
        for e in h.entries().iter().take(1000) {
            let _ = h.get(e.tag);
        }
    }
    let _ = Header::read_with_magic(&mut Cursor::new(data));
}

fn t_rpm_package(data: &[u8]) {
    let p = scratch("x.rpm", data);
    if let Ok(pkg) = rpmpkg::open(&p) {
        let _ = pkg.files();
    }
}

fn t_repomd(data: &[u8]) {
    if let Ok(md) = repodata::parse_repomd(data) {
        let _ = md.primary();
    }
}

fn t_primary(data: &[u8]) {
    let _ = repodata::parse_primary(BufReader::new(data), "fuzz");
}

fn t_rpm_version(data: &[u8]) {
    let s = text(data);
    let (a, b) = s.split_once('\n').unwrap_or((&s, "1.0-1"));
    let _ = rpmver::rpmvercmp(a, b);
    let (x, y) = (rpmver::parse_evr(a), rpmver::parse_evr(b));
    let _ = rpmver::compare_evr(&x, &y);
    let (d, e) = (rpm::Dep::parse(a), rpm::Dep::parse(b));
    let _ = (d.satisfied_by(&e), rpmver::overlaps(&d, &e), d.is_rich());
}

fn t_os_release(data: &[u8]) {
    let s = text(data);
    let os = erdma_build::distro::OsRelease::parse(&s);
    let _ = (os.describe(), os.families());
    if let Some(f) = os.families().first() {
        let _ = os.release_of(f).map(|r| r.pretty());
    }
    let _ = erdma_build::distro::OsRelease::from_release_file(&s);
    let _ = erdma_build::recipe::Recipe::for_os(&os);
}

fn t_recipe(data: &[u8]) {
    if let Ok(r) = erdma_build::recipe::Recipe::parse("fuzz", &text(data)) {
        let _ = r.for_build(true, "amd64");
    }
}

fn t_image_json(data: &[u8]) {
    use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
    let _ = serde_json::from_slice::<ImageManifest>(data);
    let _ = serde_json::from_slice::<ImageIndex>(data);
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = serde_json::from_value::<ImageConfiguration>(v.clone());
        let edit = erdma_oci::config::ConfigEdit {
            presets: erdma_build::env_presets::presets(&Default::default(), None),
            overrides: vec![("NCCL_DEBUG".into(), "INFO".into())],
            labels: Default::default(),
            created: "2024-01-01T00:00:00Z".into(),
            history_comment: "fuzz".into(),
        };
        let _ = edit.env_changes(&v);
        let _ = edit.apply(
            &v,
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "fuzz",
        );
    }
    let _ = erdma_oci::transport::ImageRef::parse(&text(data));
}

fn t_layer_tar(data: &[u8]) {
    use erdma_oci::rootfs;
    let layer = data.to_vec();
    #[allow(clippy::result_large_err)] // the signature rootfs takes
    let mut open = |_: usize| -> erdma_oci::Result<Box<dyn std::io::BufRead>> {
        Ok(Box::new(Cursor::new(layer.clone())))
    };
    let _ = rootfs::read_file(2, &mut open, "/etc/os-release", 1 << 20);
    let _ = rootfs::list_dir(2, &mut open, "/etc/apt/sources.list.d");
}

fn t_runtime_spec(data: &[u8]) {
    use erdma_oci_hook::request::{self, Request};
    use erdma_oci_hook::spec::{Editable, NOT_EDITED};
    use serde_json::Value;
    let config = fixture_config();
    // The runtime's parse, which keeps members the edit never reads as their bytes.
    let editable = Editable::parse(data, "config.json".as_ref());
    let Ok(spec) = serde_json::from_slice::<Value>(data) else { return };
    if spec.is_object() {
        let mut editable = editable.expect("a spec the whole parse reads");
        // What the edit sees is the whole parse, the kept members `null`.
        let mut seen = spec.clone();
        for (parent, keys) in NOT_EDITED {
            if let Some(Value::Object(m)) = seen.get_mut(*parent) {
                for k in *keys {
                    if let Some(v) = m.get_mut(*k) {
                        *v = Value::Null;
                    }
                }
            }
        }
        assert_eq!(editable.value, seen, "the edit sees another spec");
        // Written back, it reads as what the whole parse wrote.
        let written = serde_json::from_slice(&editable.to_vec()).expect("written as JSON");
        let whole = serde_json::from_slice(&serde_json::to_vec(&spec).unwrap()).unwrap();
        assert!(same(&written, &whole), "written back as another spec");
        let _ = erdma_oci_hook::hooks::edit_in_place(&mut editable.value, config);
    }
    let asked = request::from_spec(&spec, config);
    // Bytes said not to ask never ask.
    assert!(request::may_ask(data, config) || matches!(asked, Ok(Request::None)));
    let _ = erdma_oci_hook::hooks::edit(&spec, config);
}

/// JSON equality, floats a few units in the last place apart: serde_json (without its
/// `float_roundtrip`) reads back a float it wrote a few steps off, subnormals most.
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) if x.is_sign_negative() == y.is_sign_negative() => {
                    x.to_bits().abs_diff(y.to_bits()) <= 64
                }
                (Some(x), Some(y)) => x == y,
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|((kx, vx), (ky, vy))| kx == ky && same(vx, vy))
        }
        _ => a == b,
    }
}

fn t_hook_state(data: &[u8]) {
    // Only the state's reading: `prestart::apply` would act on the bundle it names.
    let _ = erdma_oci_hook::prestart::parse_state(data);
}

fn t_engine_config(data: &[u8]) {
    use erdma_oci_hook::engine::{self, ConfigureOptions, Engine};
    for (engine, file) in [
        (Engine::Docker, "daemon.json"),
        (Engine::Containerd, "config.toml"),
        (Engine::Crio, "crio.conf"),
    ] {
        let p = scratch(file, data);
        let opts = ConfigureOptions {
            dry_run: true,
            config_path: Some(p.clone()),
            runtime_path: "/opt/erdma/bin/erdma-runtime".into(),
            hook_path: "/opt/erdma/bin/erdma-oci-hook".into(),
        };
        let _ = engine::configure(engine, &opts);
        let _ = engine::inspect(engine, &p);
    }
}

fn t_sysfs_values(data: &[u8]) {
    // The attribute files discovery reads, each given a slice of the input, on a copy of the
    // `two` fixture tree.
    let tree = sysfs_tree();
    let files = [
        "class/infiniband/erdma_0/ports/1/state",
        "class/infiniband/erdma_0/ports/1/gids/1",
        "class/infiniband/erdma_0/ports/1/gid_attrs/types/1",
        "class/infiniband_verbs/uverbs0/dev",
        "class/net/eth0/mtu",
        "class/infiniband/erdma_0/device/numa_node",
    ];
    let chunk = data.len().div_ceil(files.len()).max(1);
    for (i, f) in files.iter().enumerate() {
        let part = data.get(i * chunk..((i + 1) * chunk).min(data.len())).unwrap_or_default();
        let _ = std::fs::write(tree.join(f), part);
    }
    if let Ok(host) =
        erdma_oci_hook::discover::discover(&tree, &tree.join("no-dev"), &["erdma".into()])
    {
        let devices: Vec<_> = host.devices.iter().collect();
        let ctx = erdma_oci_hook::nccl::Context { fail_closed: true, ..Default::default() };
        let _ =
            erdma_oci_hook::nccl::derive(&host, &devices, &erdma_oci_hook::netns::Net::Host, &ctx);
    }
    let _ = erdma_kube::deviceplugin::numa_node(&tree, "erdma_0");
}

fn t_gpu_topology(data: &[u8]) {
    // What the GPU placement reads, each given a slice of the input, on a copy of the
    // `gpu8-eri2` fixture: a switch's NUMA node, GPU 0's information file from the NVIDIA
    // driver, an ERI's GID (its address), and the container's NVIDIA_VISIBLE_DEVICES.
    use erdma_oci_hook::topology;
    let (sys, proc_root) = gpu_tree();
    let files = [
        sys.join("devices/pci0000:15/0000:15:01.0/0000:16:00.0/numa_node"),
        proc_root.join("driver/nvidia/gpus/0000:18:00.0/information"),
        sys.join("class/infiniband/erdma_1/ports/1/gids/1"),
    ];
    let chunk = data.len().div_ceil(files.len() + 1).max(1);
    for (i, f) in files.iter().enumerate() {
        let part = data.get(i * chunk..((i + 1) * chunk).min(data.len())).unwrap_or_default();
        let _ = std::fs::write(f, part);
    }
    let visible = String::from_utf8_lossy(data.get(files.len() * chunk..).unwrap_or_default());
    let t = topology::read(&sys, &proc_root, &["erdma_0", "erdma_1"]);
    let spec = serde_json::json!({"process": {"env": [format!("NVIDIA_VISIBLE_DEVICES={visible}")]},
        "linux": {"devices": [{"path": format!("/dev/nvidia{}", visible.len())}]}});
    let gpus = match topology::container_gpus(&spec, &t, &proc_root) {
        topology::GpuSet::Given { gpus, .. } => gpus,
        topology::GpuSet::Unknown => t.gpus.iter().map(|g| g.index).collect(),
    };
    let eris = t.eris_for(&gpus);
    let _ = t.gdr_level_needed(&gpus, &eris);
    if let Ok(host) =
        erdma_oci_hook::discover::discover(&sys, &sys.join("no-dev"), &["erdma".into()])
    {
        let devices: Vec<_> = host.devices.iter().collect();
        let ctx = erdma_oci_hook::nccl::Context {
            topology: Some(&t),
            gpus: Some(&gpus),
            fail_closed: true,
        };
        let _ =
            erdma_oci_hook::nccl::derive(&host, &devices, &erdma_oci_hook::netns::Net::Host, &ctx);
    }
}

/// A per-thread copy of the `gpu8-eri2` fixture: its sysfs and its /proc.
fn gpu_tree() -> (PathBuf, PathBuf) {
    thread_local! {
        static TREE: (tempfile::TempDir, PathBuf, PathBuf) = {
            let d = tempfile::Builder::new().prefix("erdma-fuzz-gpu-").tempdir().expect("a temp dir");
            let (sys, proc_root) = (d.path().join("sys"), d.path().join("proc"));
            copy_tree(&root().join("testdata/sysfs/gpu8-eri2/sys"), &sys);
            copy_tree(&root().join("testdata/sysfs/gpu8-eri2/proc"), &proc_root);
            (d, sys, proc_root)
        };
    }
    TREE.with(|(_, s, p)| (s.clone(), p.clone()))
}

fn t_nri_wire(data: &[u8]) {
    use erdma_kube::nri::wire::Demux;
    let mut d = Demux::default();
    let mut r = data;
    for _ in 0..1000 {
        match d.next(&mut r) {
            Ok(Some(m)) => {
                let _ = <erdma_kube::nri::wire::Request as prost::Message>::decode(&m.body[..]);
            }
            _ => break,
        }
    }
}

fn t_nri_create(data: &[u8]) {
    use erdma_kube::nri::{adjust, pb};
    let Ok(req) = <pb::CreateContainerRequest as prost::Message>::decode(data) else { return };
    let Some(ctr) = req.container.as_ref() else { return };
    let host = || {
        erdma_oci_hook::discover::discover(
            &root().join("testdata/sysfs/two/sys"),
            Path::new("/nonexistent"),
            &["erdma".into()],
        )
    };
    let _ = adjust::create(req.pod.as_ref(), ctr, host, fixture_config());
}

fn fixture_config() -> &'static erdma_oci_hook::config::Config {
    static C: OnceLock<erdma_oci_hook::config::Config> = OnceLock::new();
    C.get_or_init(|| erdma_oci_hook::config::Config {
        sysfs_root: root().join("testdata/sysfs/two/sys"),
        dev_root: "/nonexistent".into(),
        ..Default::default()
    })
}

/// A per-thread copy of the `two` fixture's sysfs tree.
fn sysfs_tree() -> PathBuf {
    thread_local! {
        static TREE: (tempfile::TempDir, PathBuf) = {
            let d = tempfile::Builder::new().prefix("erdma-fuzz-sysfs-").tempdir().expect("a temp dir");
            let to = d.path().join("sys");
            copy_tree(&root().join("testdata/sysfs/two/sys"), &to);
            (d, to)
        };
    }
    TREE.with(|(_, p)| p.clone())
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("readdir").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().expect("file type");
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).expect("readlink"), &dst)
                .expect("symlink");
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

pub static TARGETS: &[Target] = &[
    Target { name: "deb822", input: "deb822 stanzas (control, Packages, Release, status, .sources)", run: t_deb822, seeds: &["testdata/repos/debian-demo/dists/bookworm/Release", "testdata/repos/debian-demo/dists/bookworm/main/binary-amd64/Packages", "testdata/images/debian12-mini-files/status"] },
    Target { name: "debian-version", input: "Debian versions and relation fields", run: t_debian_version, seeds: &[] },
    Target { name: "release-signed", input: "InRelease (clear-signed) against a keyring", run: t_release_signed, seeds: &["testdata/repos/debian-demo/dists/bookworm/InRelease"] },
    Target { name: "openpgp-keys", input: "repository keys (armoured or binary)", run: t_openpgp_keys, seeds: &["testdata/keys/test-only-pubkey.asc", "testdata/keys/rfc9580-v6-sample.pub.asc", "testdata/repos/debian-demo/demo-key.asc"] },
    Target { name: "deb", input: ".deb (ar, control.tar, data.tar)", run: t_deb, seeds: &["testdata/repos/debian-demo/pool/main/libibverbs1_44.0-2_amd64.deb", "testdata/repos/debian-demo/pool/main/librdmacm1_44.0-2_amd64.deb"] },
    Target { name: "rpm-header", input: "rpm headers", run: t_rpm_header, seeds: &[] },
    Target { name: "rpm-package", input: ".rpm (lead, signature, header, payload index)", run: t_rpm_package, seeds: &[] },
    Target { name: "repomd", input: "repomd.xml", run: t_repomd, seeds: &[] },
    Target { name: "primary", input: "primary.xml", run: t_primary, seeds: &[] },
    Target { name: "rpm-version", input: "rpm versions, EVRs and dependencies (rich included)", run: t_rpm_version, seeds: &[] },
    Target { name: "os-release", input: "os-release, redhat-release", run: t_os_release, seeds: &[] },
    Target { name: "recipe", input: "recipe TOML", run: t_recipe, seeds: &["recipes/debian-family.toml", "recipes/el-family.toml"] },
    Target { name: "image-json", input: "image manifests, indexes, configs, image names", run: t_image_json, seeds: &["testdata/images/debian12-mini/index.json", "testdata/images/debian12-mini/blobs/sha256/e49db18d21d859fab01e315bfc78859ee9063a2bb352160c6abba748dc190e4b", "testdata/images/debian12-mini/blobs/sha256/d7e94cd6e7d3a00ec1910a30a0c55f29af36b1daedf92c8aa66d3076b9b93289"] },
    Target { name: "layer-tar", input: "layer tar streams as rootfs scans them (whiteouts, opaque dirs, links)", run: t_layer_tar, seeds: &[] },
    Target { name: "runtime-spec", input: "OCI runtime config.json", run: t_runtime_spec, seeds: &[] },
    Target { name: "hook-state", input: "the OCI hook's state JSON", run: t_hook_state, seeds: &[] },
    Target { name: "engine-config", input: "daemon.json, containerd and CRI-O configs", run: t_engine_config, seeds: &[] },
    Target { name: "sysfs-values", input: "sysfs attribute values", run: t_sysfs_values, seeds: &[] },
    Target { name: "gpu-topology", input: "GPU placement: a PCI NUMA node, the NVIDIA driver's information file, a GID, NVIDIA_VISIBLE_DEVICES", run: t_gpu_topology, seeds: &[] },
    Target { name: "nri-wire", input: "NRI's mux frames and ttrpc messages", run: t_nri_wire, seeds: &[] },
    Target { name: "nri-create", input: "NRI CreateContainer requests", run: t_nri_create, seeds: &[] },
    Target { name: "registry-auth", input: "registry WWW-Authenticate challenges and token service replies", run: t_registry_auth, seeds: &[] },
];
