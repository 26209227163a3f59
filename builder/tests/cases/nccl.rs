//! `--nccl`: NVIDIA's libnccl2 from a signed flat repository laid out as NVIDIA's, the build
//! for the base's CUDA, and what is refused.
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{build_fails, build_json};
use crate::support::apt_repo::{self, AptRepo, Layout, TestKey};
use crate::support::nccl::{self as nv, Extras};
use crate::support::{self, debian, debs, fixture, testdata, OciFixture};

pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// testdata's Debian 12 image (no CUDA, no RDMA).
pub fn mini() -> OciFixture {
    fixture::read_fixture(Path::new(&testdata("images/debian12-mini")), "latest")
}

/// A test key, its public half in a file, and NVIDIA's repository signed with it.
pub struct Nvidia {
    pub tmp: tempfile::TempDir,
    pub keyfile: PathBuf,
    pub repo: AptRepo,
}

pub fn nvidia(extra: &[&str]) -> Nvidia {
    let tmp = tempfile::tempdir().unwrap();
    let key = TestKey::generate();
    let keyfile = key.write_public(tmp.path(), "nvidia-test.asc");
    let repo = nv::nvidia_repo(&tmp.path().join("debs"), &key, extra);
    Nvidia { tmp, keyfile, repo }
}

impl Nvidia {
    /// The arguments that point the builtin recipes' `cuda` repository here.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--repo".into(),
            format!("cuda={}/", self.repo.url()),
            "--keyring".into(),
            format!("cuda={}", s(&self.keyfile)),
        ]
    }
}

/// The offline demo archive standing in for Debian's (eRDMA packages for debian12-mini).
pub fn demo_archive_args() -> Vec<String> {
    vec![
        "--mirror".into(),
        format!("file://{}", testdata("repos/debian-demo")),
        "--keyring".into(),
        format!("base={}", testdata("repos/debian-demo/demo-key.asc")),
    ]
}

fn run_json(args: &[String]) -> Value {
    build_json(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn fails(args: &[String]) -> String {
    build_fails(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn installed(r: &Value) -> Vec<String> {
    r["images"][0]["packages"]["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{} {}", p["name"].as_str().unwrap(), p["version"].as_str().unwrap()))
        .collect()
}

#[test]
fn the_build_for_the_base_cuda_major_is_chosen() {
    if !apt_repo::require_tools() {
        return;
    }
    let nv = nvidia(&[]);
    let mini = mini();
    // CUDA from the config env (as NVIDIA's images set it) or from version.json.
    for (cuda, in_env, want) in [
        ("11.8.0", true, "2.21.5-1+cuda11.8"),
        ("12.1.1", false, "2.21.5-1+cuda12.2"),
        ("12.4.1", true, "2.21.5-1+cuda12.4"),
        ("13.0.0", false, "2.27.7-1+cuda13.0"),
    ] {
        let base = nv::extend(
            &mini,
            &nv.tmp.path().join(format!("cuda-{cuda}")),
            "latest",
            &Extras { cuda: Some(cuda), cuda_in_env: in_env, ..Default::default() },
        );
        let mut args: Vec<String> = vec![
            "plan".into(),
            "--base".into(),
            base.reference(),
            "--nccl".into(),
            "--nccl-dev".into(),
        ];
        args.extend(nv.args());
        args.extend(demo_archive_args());
        let r = run_json(&args);
        let img = &r["images"][0];
        assert_eq!(img["packages"]["nccl"], want, "CUDA {cuda}: {}", img["packages"]);
        let got = installed(&r);
        assert!(
            got.contains(&format!("libnccl2 {want}"))
                && got.contains(&format!("libnccl-dev {want}")),
            "CUDA {cuda}: {got:?}"
        );
        // The eRDMA packages come with it, from the (demo) Debian archive.
        assert!(got.iter().any(|p| p.starts_with("libibverbs1 44.0-2")), "{got:?}");
        let short: String = cuda.split('.').take(2).collect::<Vec<_>>().join(".");
        assert_eq!(img["nccl"]["cuda"]["version"], short.as_str());
        let source = if in_env {
            "CUDA_VERSION in the image config"
        } else {
            "/usr/local/cuda/version.json"
        };
        assert_eq!(img["nccl"]["cuda"]["source"], source);
        // NVIDIA's repository is added to the image's apt sources, flat, with its key.
        let files: Vec<&str> =
            img["files_added"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        assert!(
            files.contains(&"/etc/apt/sources.list.d/cuda.list")
                && files.contains(&"/etc/apt/trusted.gpg.d/cuda.gpg"),
            "{files:?}"
        );
    }
}

#[test]
fn old_nccl_and_unknown_cuda_are_refused() {
    if !apt_repo::require_tools() {
        return;
    }
    let nv = nvidia(&[]);
    let base = nv::extend(
        &mini(),
        &nv.tmp.path().join("cuda12"),
        "latest",
        &Extras { cuda: Some("12.4.1"), cuda_in_env: true, ..Default::default() },
    );
    let out = nv.tmp.path().join("out");
    let plan = |extra: &[&str], base: &str| {
        let mut a: Vec<String> = vec![
            "build".into(),
            "--output".into(),
            format!("oci:{}", s(&out)),
            "--base".into(),
            base.into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(nv.args());
        a.extend(demo_archive_args());
        a
    };
    for v in ["2.18.3", "2.18.3-1+cuda12.2"] {
        let e = fails(&plan(&["--nccl", v], &base.reference()));
        assert!(
            e.contains("NCCL 2.18.3 is older than 2.19.0, the first release that works over eRDMA"),
            "{e}"
        );
    }
    let e = fails(&plan(&["--nccl", "2.21.5-1+cuda11.8"], &base.reference()));
    assert!(
        e.contains(
            "libnccl2 2.21.5-1+cuda11.8 is built for CUDA 11.8, and the image has CUDA 12.4"
        ),
        "{e}"
    );
    let e = fails(&plan(&["--nccl", "2.23.4"], &base.reference()));
    assert!(e.contains("has no libnccl2 2.23.4 for CUDA 12.x (it has 2.18.3, 2.21.5)"), "{e}");
    // No CUDA in the base: an error with the way out, and the way out works.
    let e = fails(&plan(&["--nccl"], &mini().reference()));
    assert!(e.contains("the base has no CUDA") && e.contains("hint: pass --cuda X.Y"), "{e}");
    let e = fails(&plan(&["--nccl", "--cuda", "twelve"], &mini().reference()));
    assert!(e.contains("invalid --cuda `twelve`"), "{e}");
    assert!(!out.exists(), "a refused build writes nothing");
    // The same as a plan (which takes no --output).
    let mut ok = plan(&["--nccl", "--cuda", "12.4"], &mini().reference());
    ok.splice(0..3, ["plan".to_string()]);
    let r = run_json(&ok);
    assert_eq!(r["images"][0]["packages"]["nccl"], "2.21.5-1+cuda12.4");
    assert_eq!(r["images"][0]["nccl"]["cuda"]["source"], "--cuda");
}

/// A recipe with a distro repository that has its own, newer-looking `libnccl2`, and the
/// NVIDIA repository; no eRDMA packages.
fn distro_and_nvidia_recipe(dir: &Path, distro: &AptRepo, nvidia: &AptRepo) -> PathBuf {
    super::write_debian12_recipe(
        dir,
        "nccl-recipe.toml",
        "Debian 12 (test repositories)",
        &format!(
            r#"[[repository]]
name = "distro"
urls = ["{}/"]
suite = "/"

[[repository]]
name = "cuda"
nccl = true
urls = ["{}/"]
suite = "/"

[packages]
install = []
"#,
            distro.url(),
            nvidia.url()
        ),
    )
}

#[test]
fn nvidia_wins_over_the_distro_and_old_pip_nccl_is_reported() {
    if !apt_repo::require_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let key = TestKey::generate();
    let keyfile = key.write_public(tmp.path(), "test.asc");
    let nvidia = nv::nvidia_repo(&tmp.path().join("nv"), &key, &[]);
    // Like Ubuntu 24.04's own libnccl2 (2.18.3-3), but with a version that sorts above NVIDIA's.
    let own = debs::fake_deb(
        &tmp.path().join("distro"),
        debs::FakeDeb {
            name: "libnccl2",
            version: "2.99.0-1",
            files: vec![("/usr/lib/x86_64-linux-gnu/libnccl.so.2", b"distro", 0o644)],
            ..Default::default()
        },
    );
    let distro = AptRepo::build_under("debian/distro", Layout::Flat, &[own], &key);
    let recipe = distro_and_nvidia_recipe(tmp.path(), &distro, &nvidia);
    let args = |base: &OciFixture, out: &str| -> Vec<String> {
        [
            "build",
            "--base",
            &base.reference(),
            "--recipe",
            &s(&recipe),
            "--keyring",
            &s(&keyfile),
            "--no-packages",
            "--nccl",
            "--output",
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let extras = |erdma| Extras {
        cuda: Some("12.4.1"),
        cuda_in_env: true,
        python3: true,
        pip_nccl: Some(("2.18.1", "12.1")),
        torch: true,
        erdma_userspace: erdma,
        ..Default::default()
    };
    // Without the eRDMA packages, the base must have libibverbs with the erdma provider.
    let bare = nv::extend(&mini(), &tmp.path().join("bare"), "latest", &extras(false));
    let out = tmp.path().join("out");
    let e = fails(&args(&bare, &format!("oci:{}:x", s(&out))));
    assert!(
        e.contains(
            "--nccl with --no-packages needs a base whose libibverbs has the erdma provider"
        ) && e.contains("dlopen"),
        "{e}"
    );
    assert!(!out.exists());

    let ready = nv::extend(&mini(), &tmp.path().join("ready"), "latest", &extras(true));
    let r = run_json(&args(&ready, &format!("oci:{}:x", s(&out))));
    assert_eq!(
        installed(&r),
        ["libnccl2 2.21.5-1+cuda12.4"],
        "NVIDIA's build, not the distro's 2.99.0-1"
    );
    let warnings: Vec<&str> = r["images"][0]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("loads its own NCCL 2.18.1")
            && warnings[0].ends_with("fix: pip install -U nvidia-nccl-cu12"),
        "{warnings:?}"
    );
    let py = &r["images"][0]["nccl"]["python_nccl"][0];
    assert_eq!(
        (py["version"].as_str(), py["cuda"].as_str()),
        (Some("2.18.1"), Some("12.1")),
        "read from the library: {py}"
    );
    // The human summary says it too.
    let mut human = args(&ready, &format!("oci:{}:y", s(&out)));
    human.push("--quiet".into());
    let o = support::run_build(&human);
    support::assert_success("erdma-build build", &o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("nccl libnccl2 2.21.5-1+cuda12.4 for CUDA 12.4") && text.contains("warning: PyTorch in /usr/local/lib/python3.11/dist-packages/torch loads its own NCCL 2.18.1"), "{text}");
}

#[test]
fn nccl_in_a_real_debian12_image_under_docker() {
    if !support::require_docker()
        || !debian::require_base()
        || !debs::require_download()
        || !apt_repo::require_tools()
    {
        return;
    }
    let nv = nvidia(&[]);
    let base = nv::extend(
        &debian::debian12_base(),
        &nv.tmp.path().join("base"),
        "latest",
        &Extras { cuda: Some("12.4.1"), ..Default::default() },
    );
    // Before: not ready (no eRDMA provider, no NCCL).
    let before = support::run_build(["check", &base.reference(), "--json"]);
    assert_eq!(before.status.code(), Some(1), "{}", String::from_utf8_lossy(&before.stderr));
    let report: Value = serde_json::from_slice(&before.stdout).unwrap();
    assert_eq!(report["ready"], false);
    assert_eq!(check_status(&report, "erdma-provider"), "fail");

    let archive = nv.tmp.path().join("out.tar");
    let name = format!("erdma-test/deb12-nccl:{}", std::process::id());
    let mut args: Vec<String> = [
        "build",
        "--base",
        &base.reference(),
        "--nccl",
        "latest",
        "--nccl-dev",
        "--output",
        &format!("docker-archive:{}:{name}", s(&archive)),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(nv.args());
    let r = run_json(&args);
    assert_eq!(r["images"][0]["packages"]["nccl"], "2.21.5-1+cuda12.4");

    // After: ready, read straight from the docker-archive.
    let after = support::run_build(["check", &format!("docker-archive:{}", s(&archive)), "--json"]);
    let report: Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(after.status.code(), Some(0), "{report:#}");
    assert_eq!(report["facts"]["system_nccl"]["version"], "2.21.5");
    assert_eq!(report["facts"]["system_nccl"]["package"], "libnccl2 2.21.5-1+cuda12.4");

    let load = Command::new("docker").args(["load", "-i", &s(&archive)]).output().unwrap();
    support::assert_success("docker load", &load);
    let out = Command::new("docker")
        .args(["run", "--rm", "--network", "none", &name, "bash", "-c"])
        .arg(
            "set -e
             dpkg -s libnccl2 libnccl-dev | grep -E '^(Package|Status|Version):'
             apt-mark showhold
             echo AUDIT; dpkg --audit; echo END
             apt-get check -q >/dev/null && echo CHECK-OK
             dpkg --verify libnccl2 libnccl-dev && echo VERIFY-OK
             cat /etc/apt/sources.list.d/cuda.list
             grep -c 'NCCL version 2.21.5+cuda12.4' /usr/lib/x86_64-linux-gnu/libnccl.so.2",
        )
        .output()
        .unwrap();
    support::docker_rmi(&name);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("Package: libnccl2\nStatus: hold ok installed\nVersion: 2.21.5-1+cuda12.4\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "Package: libnccl-dev\nStatus: hold ok installed\nVersion: 2.21.5-1+cuda12.4\n"
        ),
        "{text}"
    );
    assert!(text.contains("libnccl-dev\nlibnccl2\n"), "held: {text}");
    assert!(
        text.contains("AUDIT\nEND\n") && text.contains("CHECK-OK") && text.contains("VERIFY-OK"),
        "{text}"
    );
    assert!(text.contains(&format!("deb {}/ /\n", nv.repo.url())), "{text}");
    assert!(text.ends_with("1\n"), "{text}");
}

pub fn check_status<'a>(report: &'a Value, id: &str) -> &'a str {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {report:#}"))["status"]
        .as_str()
        .unwrap()
}
