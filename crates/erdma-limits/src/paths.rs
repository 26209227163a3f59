//! Paths inside an image, as hostile archives name them: normalised or refused, before any
//! backend (a layer, a `.deb`'s data, an `.rpm`'s payload) uses them.

/// Why a package payload entry's name is refused whatever it is (dpkg: "newline not allowed in
/// archive object name"): dpkg's `.list` files and rpm's tools hold one path per line.
pub const ODD_NAME: &str = "its name holds a newline or NUL byte";

/// Whether `path` holds a newline or NUL ([`ODD_NAME`]).
pub fn odd_name(path: &str) -> bool {
    path.bytes().any(|b| b == b'\n' || b == 0)
}

/// Normalises an in-image path: no leading `/` or `./`, no empty, `.` or `..` components.
/// `None` for a path that climbs out (`..`) or names the root itself.
pub fn normalize(path: &str) -> Option<String> {
    let mut parts = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_or_refused() {
        assert_eq!(normalize("/usr/./lib//x").as_deref(), Some("usr/lib/x"));
        assert_eq!(normalize("./etc/"), Some("etc".to_string()));
        assert_eq!(normalize("/usr/../../etc/passwd"), None);
        assert_eq!(normalize("/"), None);
        assert!(odd_name("a\nb") && odd_name("a\0b") && !odd_name("a b"));
    }
}
