//! Container log files as the log server reads them, pure: the CRI log line format
//! (`<RFC3339Nano> stdout|stderr F|P <message>`, written by containerd), rendering a line for
//! `kubectl logs` (prefix stripped unless `timestamps`, `sinceSeconds`/`sinceTime` filtering, `P`
//! fragments joined with the next line), and where the last N lines of a file start (`tailLines`).
//! Static (`kiln-host`) pods log raw process output, one file per run: those lines pass through as they are.

use std::io::{Read, Seek, SeekFrom};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// How a container's log file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// containerd's CRI format (workload pods).
    Cri,
    /// Raw process output (static pods on `kiln-host`): no timestamps to strip or filter on.
    Raw,
}

/// One parsed CRI log line (without its newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLine<'a> {
    pub timestamp: &'a str,
    pub stream: &'a str,
    /// `P`: a fragment of a longer line, continued by the next entry.
    pub partial: bool,
    pub message: &'a [u8],
}

/// Parses `<timestamp> <stream> <tag> <message>`; None when the line is not in CRI format.
pub fn parse_cri_line(line: &[u8]) -> Option<CriLine<'_>> {
    let mut fields = line.splitn(4, |b| *b == b' ');
    let timestamp = std::str::from_utf8(fields.next()?).ok()?;
    let stream = std::str::from_utf8(fields.next()?).ok()?;
    if stream != "stdout" && stream != "stderr" {
        return None;
    }
    // The tag may carry more flags after `:` in later CRI versions; only the first matters.
    let tag = fields.next()?;
    let partial = match tag.split(|b| *b == b':').next()? {
        b"P" => true,
        b"F" => false,
        _ => return None,
    };
    // An empty line is written as `<ts> stdout F ` or, by some runtimes, without the last space.
    let message = fields.next().unwrap_or(b"");
    if timestamp.is_empty() {
        return None;
    }
    Some(CriLine {
        timestamp,
        stream,
        partial,
        message,
    })
}

/// What `kubectl logs` asked for, as far as rendering lines goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    pub timestamps: bool,
    /// Lines older than this are skipped (sinceSeconds / sinceTime).
    pub since: Option<OffsetDateTime>,
}

/// The bytes `kubectl logs` shows for one line of the file (`line` without its newline), or None when
/// the line is filtered out.
pub fn render_line(line: &[u8], format: LogFormat, opts: &RenderOptions) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(line.len() + 1);
    match (format, parse_cri_line(line)) {
        (LogFormat::Cri, Some(l)) => {
            if let Some(since) = opts.since {
                // A timestamp we cannot read is kept: dropping output silently is worse.
                if OffsetDateTime::parse(l.timestamp, &Rfc3339).is_ok_and(|t| t < since) {
                    return None;
                }
            }
            if opts.timestamps {
                out.extend_from_slice(l.timestamp.as_bytes());
                out.push(b' ');
            }
            out.extend_from_slice(l.message);
            if !l.partial {
                out.push(b'\n');
            }
        }
        // A raw file, or a line that is not in CRI format: shown as it is.
        _ => {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    Some(out)
}

const BLOCK: usize = 32 * 1024;

/// The offset where the last `n` lines of `r` start (a last line without its newline counts as a line).
pub fn tail_offset<R: Read + Seek>(r: &mut R, n: u64) -> std::io::Result<u64> {
    let len = r.seek(SeekFrom::End(0))?;
    if n == 0 {
        return Ok(len);
    }
    let mut end = len;
    let mut newlines = 0u64;
    // The newline that ends the file ends the last line; it does not start one.
    let mut skip_last = true;
    let mut buf = vec![0u8; BLOCK];
    while end > 0 {
        let start = end.saturating_sub(BLOCK as u64);
        let size = (end - start) as usize;
        r.seek(SeekFrom::Start(start))?;
        r.read_exact(&mut buf[..size])?;
        for i in (0..size).rev() {
            let pos = start + i as u64;
            if buf[i] != b'\n' {
                continue;
            }
            if skip_last && pos == len - 1 {
                continue;
            }
            newlines += 1;
            if newlines == n {
                return Ok(pos + 1);
            }
        }
        skip_last = false;
        end = start;
    }
    Ok(0)
}

/// Parses sinceTime (RFC 3339).
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    const OUT: &[u8] = b"2026-11-29T10:00:00.123456789Z stdout F hello world";

    #[test]
    fn parses_cri_lines() {
        let l = parse_cri_line(OUT).unwrap();
        assert_eq!(l.timestamp, "2026-11-29T10:00:00.123456789Z");
        assert_eq!((l.stream, l.partial), ("stdout", false));
        assert_eq!(l.message, b"hello world");
        let p = parse_cri_line(b"2026-11-29T10:00:00Z stderr P part").unwrap();
        assert_eq!(
            (p.stream, p.partial, p.message),
            ("stderr", true, &b"part"[..])
        );
        assert_eq!(
            parse_cri_line(b"2026-11-29T10:00:00Z stdout F ")
                .unwrap()
                .message,
            b""
        );
        assert_eq!(
            parse_cri_line(b"2026-11-29T10:00:00Z stdout F")
                .unwrap()
                .message,
            b""
        );
        assert!(parse_cri_line(b"plain process output").is_none());
        assert!(parse_cri_line(b"2026-11-29T10:00:00Z stdin F x").is_none());
        assert!(parse_cri_line(b"2026-11-29T10:00:00Z stdout X x").is_none());
    }

    #[test]
    fn renders_with_and_without_timestamps() {
        let plain = RenderOptions::default();
        assert_eq!(
            render_line(OUT, LogFormat::Cri, &plain).unwrap(),
            b"hello world\n"
        );
        let ts = RenderOptions {
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            render_line(OUT, LogFormat::Cri, &ts).unwrap(),
            b"2026-11-29T10:00:00.123456789Z hello world\n"
        );
        // A fragment is continued by the next entry: no newline of its own.
        assert_eq!(
            render_line(b"2026-11-29T10:00:00Z stdout P abc", LogFormat::Cri, &plain).unwrap(),
            b"abc"
        );
        // Raw files (kiln-host pods) are not parsed, even when a line looks like CRI.
        assert_eq!(
            render_line(OUT, LogFormat::Raw, &plain).unwrap(),
            [OUT, b"\n"].concat()
        );
        assert_eq!(
            render_line(b"not cri", LogFormat::Cri, &plain).unwrap(),
            b"not cri\n"
        );
    }

    #[test]
    fn since_skips_older_lines() {
        let opts = RenderOptions {
            since: parse_time("2026-11-29T10:00:00.5Z"),
            ..Default::default()
        };
        assert!(render_line(OUT, LogFormat::Cri, &opts).is_none());
        let later = b"2026-11-29T10:00:01Z stdout F later";
        assert_eq!(
            render_line(later, LogFormat::Cri, &opts).unwrap(),
            b"later\n"
        );
    }

    fn tail(data: &[u8], n: u64) -> Vec<u8> {
        let off = tail_offset(&mut Cursor::new(data), n).unwrap() as usize;
        data[off..].to_vec()
    }

    #[test]
    fn tail_finds_the_last_lines() {
        let data = b"one\ntwo\nthree\n";
        assert_eq!(tail(data, 1), b"three\n");
        assert_eq!(tail(data, 2), b"two\nthree\n");
        assert_eq!(tail(data, 3), data);
        assert_eq!(tail(data, 10), data);
        assert_eq!(tail(data, 0), b"");
        // A last line still being written counts as a line.
        assert_eq!(tail(b"one\ntwo", 1), b"two");
        assert_eq!(tail(b"", 5), b"");
        assert_eq!(tail(b"\n\n", 1), b"\n");
    }

    #[test]
    fn tail_crosses_block_boundaries() {
        let mut data = Vec::new();
        for i in 0..20_000 {
            data.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        assert_eq!(tail(&data, 2), b"line 19998\nline 19999\n");
        let t = tail(&data, 15_000);
        assert!(t.starts_with(b"line 5000\n"), "{:?}", &t[..20]);
    }
}
