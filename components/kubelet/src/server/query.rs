//! Query strings and path segments of requests to the kubelet server, pure.

/// Decodes `%XX` escapes (and `+` as a space, as Go's url.ParseQuery does).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a=1&b=x%20y&a=2` → [("a","1"), ("b","x y"), ("a","2")], order and repeats kept (exec's `command`).
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub fn get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Go's strconv.ParseBool, which the kubelet uses for these flags; absent is false.
pub fn get_bool(q: &[(String, String)], key: &str) -> Result<bool, String> {
    match get(q, key) {
        None => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False" | "") => Ok(false),
        Some(other) => Err(format!("{key}: invalid boolean {other:?}")),
    }
}

pub fn get_i64(q: &[(String, String)], key: &str) -> Result<Option<i64>, String> {
    get(q, key)
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| format!("{key}: invalid integer {v:?}"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_keep_repeats_and_decode() {
        let q = parse_query("command=sh&command=-c&command=echo%20a%2Bb&tty=1&x");
        let cmds: Vec<&str> = q
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(cmds, ["sh", "-c", "echo a+b"]);
        assert_eq!(get_bool(&q, "tty"), Ok(true));
        assert_eq!(get_bool(&q, "stdin"), Ok(false));
        assert_eq!(get(&q, "x"), Some(""));
        assert!(get_bool(&parse_query("follow=yes"), "follow").is_err());
        assert_eq!(
            get_i64(&parse_query("tailLines=3"), "tailLines"),
            Ok(Some(3))
        );
        assert!(get_i64(&parse_query("tailLines=x"), "tailLines").is_err());
        assert_eq!(percent_decode("a%zz%4"), "a%zz%4");
    }
}
