//! What `chmod` and `setcap` do to a file, for the maintainer-script emulation: a
//! mode change as chmod(1) reads it, and file capabilities as setcap(8) (libcap's
//! `cap_from_text`, then `cap_set_file`) writes them into the `security.capability` xattr.
//! Anything outside the forms below is `None`, and the caller refuses to emulate it.

/// A mode change: `chmod 4755 PATH` or `chmod u+s,go-w PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeChange {
    /// An octal mode, the whole of the permission bits.
    Set(u32),
    /// Symbolic clauses in order: the bits each adds (`+`) or removes (`-`).
    Symbolic(Vec<(bool, u32)>),
}

impl ModeChange {
    /// chmod(1)'s mode argument: octal (at most four digits), or comma-separated clauses
    /// `WHO(+|-)PERMS…` with `WHO` from `ugoa` given (no umask applies then) and `PERMS` from
    /// `rwxst`. `=`, `X`, copies (`g+u`) and an empty `WHO` are not read.
    pub fn parse(text: &str) -> Option<ModeChange> {
        if !text.is_empty() && text.len() <= 4 && text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Some(ModeChange::Set(u32::from_str_radix(text, 8).ok()?));
        }
        let mut out = Vec::new();
        for clause in text.split(',') {
            let ops_at = clause.find(['+', '-', '='])?;
            let (who, mut rest) = clause.split_at(ops_at);
            if who.is_empty() || !who.bytes().all(|b| b"ugoa".contains(&b)) {
                return None;
            }
            let has = |c: char| who.contains(c) || who.contains('a');
            while !rest.is_empty() {
                let add = match rest.as_bytes()[0] {
                    b'+' => true,
                    b'-' => false,
                    _ => return None,
                };
                rest = &rest[1..];
                let end = rest.find(['+', '-', '=']).unwrap_or(rest.len());
                let (perms, after) = rest.split_at(end);
                let mut bits = 0;
                for p in perms.chars() {
                    bits |= match p {
                        'r' | 'w' | 'x' => {
                            let b = match p {
                                'r' => 4,
                                'w' => 2,
                                _ => 1,
                            };
                            let mut m = 0;
                            for (c, shift) in [('u', 6), ('g', 3), ('o', 0)] {
                                if has(c) {
                                    m |= b << shift;
                                }
                            }
                            m
                        }
                        's' => {
                            (if has('u') { 0o4000 } else { 0 }) | if has('g') { 0o2000 } else { 0 }
                        }
                        't' if has('o') => 0o1000,
                        't' => 0,
                        _ => return None,
                    };
                }
                out.push((add, bits));
                rest = after;
            }
        }
        (!out.is_empty()).then_some(ModeChange::Symbolic(out))
    }

    /// The permission bits (`0o7777`) after the change, from `mode`.
    pub fn apply(&self, mode: u32) -> u32 {
        match self {
            ModeChange::Set(m) => m & 0o7777,
            ModeChange::Symbolic(clauses) => clauses.iter().fold(
                mode & 0o7777,
                |m, (add, bits)| {
                    if *add {
                        m | bits
                    } else {
                        m & !bits
                    }
                },
            ),
        }
    }
}

/// The capability names of `linux/capability.h`, by number, as libcap spells them.
const CAPS: &[&str] = &[
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// `VFS_CAP_REVISION_2` and `VFS_CAP_FLAGS_EFFECTIVE` (`linux/capability.h`).
const REVISION_2: u32 = 0x0200_0000;
const FLAGS_EFFECTIVE: u32 = 0x0000_0001;

/// The `security.capability` value `setcap TEXT FILE` writes, run as root in the image's
/// initial user namespace (as `apt-get` runs in `docker build`): a `vfs_cap_data` of revision 2
/// (20 bytes: the magic with the effective flag, then the permitted and inheritable words of
/// capabilities 0–31 and 32–63, little endian). `TEXT` is clauses of capability names
/// (`cap_net_raw,cap_net_admin`) each followed by `+`/`-`/`=` and flags from `eip`
/// (cap_from_text(3)). `None` for what setcap would refuse (an effective set that is neither
/// empty nor all of permitted and inheritable: `cap_set_file` fails with EINVAL), for no
/// capability at all, and for forms not read here (`all`, a clause without names).
pub fn capability_xattr(text: &str) -> Option<Vec<u8>> {
    // [permitted, inheritable, effective], each a 64-bit set.
    let mut sets = [0u64; 3];
    for clause in text.split_whitespace() {
        let ops_at = clause.find(['+', '-', '='])?;
        let (names, mut ops) = clause.split_at(ops_at);
        let mut mask = 0u64;
        for name in names.split(',') {
            let bare = name.to_ascii_lowercase();
            let bare = bare.strip_prefix("cap_")?;
            mask |= 1u64 << CAPS.iter().position(|c| *c == bare)?;
        }
        while !ops.is_empty() {
            let op = ops.as_bytes()[0];
            ops = &ops[1..];
            let end = ops.find(['+', '-', '=']).unwrap_or(ops.len());
            let (flags, after) = ops.split_at(end);
            if op == b'=' {
                sets.iter_mut().for_each(|s| *s &= !mask);
            }
            for f in flags.chars() {
                let i = match f {
                    'p' => 0,
                    'i' => 1,
                    'e' => 2,
                    _ => return None,
                };
                match op {
                    b'+' | b'=' => sets[i] |= mask,
                    _ => sets[i] &= !mask,
                }
            }
            ops = after;
        }
    }
    let [permitted, inheritable, effective] = sets;
    if permitted | inheritable == 0 {
        return None;
    }
    let mut magic = REVISION_2;
    if effective != 0 {
        if effective != permitted | inheritable {
            return None;
        }
        magic |= FLAGS_EFFECTIVE;
    }
    let mut out = Vec::with_capacity(20);
    out.extend_from_slice(&magic.to_le_bytes());
    for half in [0, 32] {
        out.extend_from_slice(&((permitted >> half) as u32).to_le_bytes());
        out.extend_from_slice(&((inheritable >> half) as u32).to_le_bytes());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_as_chmod_reads_them() {
        assert_eq!(ModeChange::parse("4755").unwrap().apply(0o644), 0o4755);
        assert_eq!(ModeChange::parse("u+s").unwrap().apply(0o755), 0o4755);
        assert_eq!(ModeChange::parse("u-s").unwrap().apply(0o4755), 0o755);
        assert_eq!(ModeChange::parse("g+s,o-rx").unwrap().apply(0o755), 0o2750);
        assert_eq!(ModeChange::parse("a+x").unwrap().apply(0o644), 0o755);
        assert_eq!(ModeChange::parse("ug+s-x").unwrap().apply(0o755), 0o6645);
        assert_eq!(ModeChange::parse("o+t").unwrap().apply(0o777), 0o1777);
        for refused in ["+x", "u=rwx", "u+X", "g+u", "u+q", "", "88", "12345", "u"] {
            assert_eq!(ModeChange::parse(refused), None, "{refused}");
        }
    }

    #[test]
    fn capabilities_as_setcap_writes_them() {
        // What setcap 2.66 (Debian 12's libcap2-bin) wrote for iputils-ping's
        // `setcap cap_net_raw+ep`, read back with getxattr(2).
        let v = capability_xattr("cap_net_raw+ep").unwrap();
        assert_eq!(hex(&v), "0100000200200000000000000000000000000000");
        // Permitted only: no effective flag. Capabilities above 31 land in the second word.
        let v = capability_xattr("cap_net_bind_service,cap_bpf=p").unwrap();
        assert_eq!(hex(&v), "0000000200040000000000008000000000000000");
        // `=` clears first; `-` lowers.
        assert_eq!(capability_xattr("cap_chown+ep cap_chown=p").unwrap()[..4], [0, 0, 0, 2]);
        assert_eq!(capability_xattr("cap_chown,cap_kill+p cap_kill-p").unwrap()[4], 1);
        // An effective set that is not all of the others: setcap fails (EINVAL).
        assert_eq!(capability_xattr("cap_chown+p cap_kill+ep"), None);
        for refused in ["", "cap_chown", "cap_nonsense+ep", "all+ep", "=ep", "cap_chown+x"] {
            assert_eq!(capability_xattr(refused), None, "{refused}");
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The real setcap is the oracle: each text gives the xattr setcap writes on a file here
    /// (as root in the initial user namespace, revision 2), or fails where it fails.
    #[test]
    fn capabilities_equal_the_real_setcap() {
        let setcap = std::path::Path::new("/usr/sbin/setcap");
        if !setcap.exists() || !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root and /usr/sbin/setcap (libcap2-bin, scripts/setup)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        for text in [
            "cap_net_raw+ep",
            "cap_net_raw=ep",
            "cap_net_admin,cap_net_raw+ep",
            "cap_net_bind_service=+ep",
            "cap_sys_nice+ip cap_sys_nice+e",
            "cap_ipc_lock,cap_sys_resource+p",
            "cap_perfmon,cap_bpf,cap_checkpoint_restore+eip",
            "CAP_DAC_OVERRIDE+ep",
            "cap_chown,cap_kill+p cap_kill-p",
            "cap_chown+p cap_kill+ep",
        ] {
            std::fs::write(&file, b"x").unwrap();
            let ok = std::process::Command::new(setcap)
                .args([text, file.to_str().unwrap()])
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap()
                .success();
            let real = ok.then(|| xattr(&file)).flatten();
            assert_eq!(capability_xattr(text).map(|v| hex(&v)), real.map(|v| hex(&v)), "{text}");
            std::fs::remove_file(&file).unwrap();
        }
    }

    fn xattr(path: &std::path::Path) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 64];
        let n = rustix::fs::getxattr(path, "security.capability", &mut buf).ok()?;
        Some(buf[..n].to_vec())
    }
}
