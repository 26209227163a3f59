//! Where a process's cgroup is: its line in `/proc/PID/cgroup` and the hierarchy's mount in
//! `/proc/self/mountinfo`, read from their text (the callers read the files).
use std::path::PathBuf;

/// The path of the cgroup v1 hierarchy that has `controller`, from `/proc/PID/cgroup`'s text
/// (`5:devices:/docker/abc`, or controllers joined: `4:cpu,memory:/a`).
pub fn v1_path<'a>(cgroups: &'a str, controller: &str) -> Option<&'a str> {
    cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers.split(',').any(|c| c == controller).then_some(path)
    })
}

/// The path in the unified (v2) hierarchy, from `/proc/PID/cgroup`'s text (`0::/user.slice`).
pub fn v2_path(cgroups: &str) -> Option<&str> {
    cgroups.lines().find_map(|l| l.strip_prefix("0::"))
}

/// Root and mount point of a cgroup mount in `/proc/self/mountinfo`'s text: the v1 hierarchy
/// with `Some(controller)`, the unified one with `None`. The root is the part of the hierarchy
/// the mount shows (`/` mostly; `/docker/ID` in a container without a cgroup namespace).
pub fn mount(mountinfo: &str, controller: Option<&str>) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let (fstype, _source, opts) = (post.next()?, post.next()?, post.next().unwrap_or(""));
        let ours = match controller {
            Some(c) => fstype == "cgroup" && opts.split(',').any(|o| o == c),
            None => fstype == "cgroup2",
        };
        if !ours {
            return None;
        }
        let pre: Vec<&str> = pre.split_whitespace().collect();
        Some((unescape_mountinfo(pre.get(3)?), PathBuf::from(unescape_mountinfo(pre.get(4)?))))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_lines() {
        let cg = "9:name=systemd:/\n5:devices:/docker/abc\n4:cpu,memory:/x\n0::/\n";
        assert_eq!(v1_path(cg, "devices"), Some("/docker/abc"));
        assert_eq!(v1_path(cg, "memory"), Some("/x"));
        assert_eq!(v1_path(cg, "pids"), None);
        assert_eq!(v2_path(cg), Some("/"));
        assert_eq!(v1_path("0::/user.slice\n", "devices"), None);
        assert_eq!(v2_path("5:devices:/a\n"), None);
    }

    #[test]
    fn mounts() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n\
                  31 25 0:27 /nested /sys/fs/cgroup/dev\\040ices rw,relatime - cgroup cgroup rw,devices\n\
                  32 25 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            mount(mi, Some("devices")),
            Some(("/nested".into(), PathBuf::from("/sys/fs/cgroup/dev ices")))
        );
        assert_eq!(
            mount(mi, Some("memory")),
            Some(("/".into(), PathBuf::from("/sys/fs/cgroup/memory")))
        );
        assert_eq!(mount(mi, None), Some(("/".into(), PathBuf::from("/sys/fs/cgroup/unified"))));
        assert_eq!(mount(mi, Some("pids")), None);
        assert_eq!(unescape_mountinfo(r"a\134b\011c\12"), "a\\b\tc\\12");
    }
}
