//! Go's renderings of values that upstream agnhost prints and e2e tests match byte for byte: `%q` of a
//! string, `os.FileMode`'s `String()`, errno texts, `[a b c]` of a slice, Go durations.

use std::fmt::Write as _;
use std::time::Duration;

/// `fmt.Sprintf("%q", s)`: double-quoted with Go escapes (the paths e2e tests print are plain, but a
/// path with a quote or a control character must still come out as Go would write it).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `os.FileMode.String()` of what `os.Stat` reports for a `st_mode`: the type and special-bit letters
/// in Go's order (`dalTLDpSugct?`), or `-` when there are none, then `rwxrwxrwx`. e2e expects e.g.
/// `dgtrwxrwxrwx` for an fsGroup subPath directory, so the letters and their order matter.
pub fn file_mode(st_mode: u32) -> String {
    let fmt = st_mode & libc::S_IFMT;
    let mut letters = String::new();
    if fmt == libc::S_IFDIR {
        letters.push('d');
    }
    if fmt == libc::S_IFLNK {
        letters.push('L');
    }
    if fmt == libc::S_IFBLK || fmt == libc::S_IFCHR {
        letters.push('D');
    }
    if fmt == libc::S_IFIFO {
        letters.push('p');
    }
    if fmt == libc::S_IFSOCK {
        letters.push('S');
    }
    if st_mode & libc::S_ISUID != 0 {
        letters.push('u');
    }
    if st_mode & libc::S_ISGID != 0 {
        letters.push('g');
    }
    if fmt == libc::S_IFCHR {
        letters.push('c');
    }
    if st_mode & libc::S_ISVTX != 0 {
        letters.push('t');
    }
    if letters.is_empty() {
        letters.push('-');
    }
    letters + &rwx(st_mode)
}

/// `os.FileMode.Perm().String()`: the permission bits only, always with a leading `-`.
pub fn file_perm(st_mode: u32) -> String {
    format!("-{}", rwx(st_mode))
}

fn rwx(mode: u32) -> String {
    const LETTERS: &[u8; 9] = b"rwxrwxrwx";
    (0..9)
        .map(|i| {
            if mode & (1 << (8 - i)) != 0 {
                LETTERS[i] as char
            } else {
                '-'
            }
        })
        .collect()
}

/// Go's `syscall.Errno` text: the C library's message with a lowercase first letter
/// ("no such file or directory"), which is what Go's table holds for Linux.
pub fn errno_text(err: &std::io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => {
            let msg = nix::errno::Errno::from_raw(code).desc().to_string();
            let mut chars = msg.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => msg,
            }
        }
        None => err.to_string(),
    }
}

/// A Go `*os.PathError`'s text: `open /x: no such file or directory`.
pub fn path_error(op: &str, path: &str, err: &std::io::Error) -> String {
    format!("{op} {path}: {}", errno_text(err))
}

/// `fmt.Printf("%v", []string{…})`: `[a b c]`.
pub fn slice(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// `time.Duration.String()`: `1.5s`, `2m0s`, `0s`, `150ms`, as Go prints it in log lines.
pub fn duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = d.as_secs();
    let (h, m) = (total_secs / 3600, (total_secs / 60) % 60);
    let secs = trim_fraction(nanos % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// `value / unit` with the fraction's trailing zeros dropped (`1.5`, `2`).
fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_as_go() {
        assert_eq!(quote("/test-volume"), "\"/test-volume\"");
        assert_eq!(quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(quote("\x01"), "\"\\x01\"");
    }

    #[test]
    fn file_modes_match_go() {
        assert_eq!(file_mode(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(file_mode(libc::S_IFDIR | 0o777), "drwxrwxrwx");
        assert_eq!(
            file_mode(libc::S_IFDIR | libc::S_ISGID | libc::S_ISVTX | 0o777),
            "dgtrwxrwxrwx"
        );
        assert_eq!(file_mode(libc::S_IFCHR | 0o666), "Dcrw-rw-rw-");
        assert_eq!(
            file_perm(libc::S_IFDIR | libc::S_ISGID | 0o2775),
            "-rwxrwxr-x"
        );
        assert_eq!(file_perm(libc::S_IFREG | 0o660), "-rw-rw----");
    }

    #[test]
    fn errno_texts_are_lowercase() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(errno_text(&e), "no such file or directory");
        assert_eq!(
            path_error("open", "/x", &e),
            "open /x: no such file or directory"
        );
    }

    #[test]
    fn durations_print_as_go() {
        assert_eq!(duration(Duration::ZERO), "0s");
        assert_eq!(duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration(Duration::from_secs(120)), "2m0s");
        assert_eq!(duration(Duration::from_millis(150)), "150ms");
        assert_eq!(duration(Duration::from_secs(3661)), "1h1m1s");
    }

    #[test]
    fn slices_print_as_go() {
        assert_eq!(slice(&["/agnhost".into(), "a".into()]), "[/agnhost a]");
    }
}
