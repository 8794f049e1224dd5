//! What a kiln binary says it is (`kiln-x --version`: `kiln-x 0.1.0 (build B, Kubernetes v1.33.0)`,
//! see kiln_common::version), parsed so that two builds can be compared and the skew policy applied.

use std::fmt;

/// A `major.minor.patch` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Semver(pub u64, pub u64, pub u64);

impl Semver {
    pub fn parse(s: &str) -> Option<Semver> {
        let s = s.trim().trim_start_matches('v');
        // Pre-release and build parts do not order releases here.
        let core = s.split(['-', '+']).next()?;
        let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
        let v = Semver(it.next()??, it.next()??, it.next().flatten().unwrap_or(0));
        it.next().is_none().then_some(v)
    }
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// One binary's stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub kiln: Semver,
    /// The build (`git describe` or `KILN_BUILD_VERSION`); None for binaries from before builds were
    /// stamped.
    pub build: Option<String>,
    /// The Kubernetes release the binary speaks; None when it does not say (binaries from before the
    /// stamp speak v1.33).
    pub kube: Option<Semver>,
}

impl Stamp {
    /// Parses a `--version` line; None when it is not a kiln binary's.
    pub fn parse(line: &str) -> Option<Stamp> {
        let mut words = line.split_whitespace();
        let name = words.next()?;
        if !name.starts_with("kiln") {
            return None;
        }
        let kiln = Semver::parse(words.next()?)?;
        let rest: String = words.collect::<Vec<_>>().join(" ");
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_default();
        let mut build = None;
        let mut kube = None;
        for part in inner.split(',').map(str::trim) {
            if let Some(b) = part.strip_prefix("build ") {
                build = Some(b.to_string());
            } else if let Some(k) = part.strip_prefix("Kubernetes ") {
                kube = Semver::parse(k);
            }
        }
        Some(Stamp { kiln, build, kube })
    }

    /// The Kubernetes release, with unstamped binaries taken as the last release before the stamp.
    pub fn kube_or_default(&self) -> Semver {
        self.kube.unwrap_or(Semver(1, 33, 0))
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kiln)?;
        if let Some(b) = &self.build {
            write!(f, "+{b}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_long_version_line() {
        let s =
            Stamp::parse("kiln-kubelet 0.1.0 (build ba49d39-dirty, Kubernetes v1.33.0)").unwrap();
        assert_eq!(s.kiln, Semver(0, 1, 0));
        assert_eq!(s.build.as_deref(), Some("ba49d39-dirty"));
        assert_eq!(s.kube, Some(Semver(1, 33, 0)));
        assert_eq!(s.to_string(), "0.1.0+ba49d39-dirty");
        // The line the stamp's own constant makes, whatever this build is.
        let own = format!("kiln {}", kiln_common::version::LONG);
        assert_eq!(
            Stamp::parse(&own).unwrap().build.as_deref(),
            Some(kiln_common::version::BUILD)
        );
    }

    #[test]
    fn binaries_from_before_the_stamp_still_parse() {
        let s = Stamp::parse("kiln-proxy 0.1.0").unwrap();
        assert_eq!((s.build, s.kube), (None, None));
        assert_eq!(
            Stamp::parse("kiln-proxy 0.1.0").unwrap().kube_or_default(),
            Semver(1, 33, 0)
        );
        assert_eq!(Stamp::parse("bash: kiln-proxy: not found"), None);
        assert_eq!(Stamp::parse("kiln-proxy"), None);
    }

    #[test]
    fn semver_ignores_prerelease_and_build() {
        assert_eq!(
            Semver::parse("v1.33.0-kiln.0.1.0+x"),
            Some(Semver(1, 33, 0))
        );
        assert_eq!(Semver::parse("1.34"), Some(Semver(1, 34, 0)));
        assert_eq!(Semver::parse("1.x.0"), None);
        assert_eq!(Semver::parse("1.2.3.4"), None);
        assert!(Semver(1, 33, 9) < Semver(1, 34, 0));
    }
}
