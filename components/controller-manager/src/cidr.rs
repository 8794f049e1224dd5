//! Pod CIDR allocation, pure: the cluster CIDR cut into per-node subnets of `--node-cidr-mask-size`,
//! handed out lowest first, skipping those already in use (IPv4).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CidrError {
    #[error("invalid CIDR {0:?}")]
    Invalid(String),
    #[error("node mask /{mask} does not fit in cluster CIDR {cidr}")]
    MaskTooSmall { cidr: String, mask: u8 },
    #[error("cluster CIDR {0} is full")]
    Full(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Net {
    pub fn parse(s: &str) -> Result<Ipv4Net, CidrError> {
        let invalid = || CidrError::Invalid(s.to_string());
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(invalid)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| invalid())?;
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        if prefix > 32 {
            return Err(invalid());
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Ok(Ipv4Net {
            addr: Ipv4Addr::from(u32::from(addr) & mask),
            prefix,
        })
    }
}

impl std::fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[derive(Debug, Clone)]
pub struct CidrSet {
    cluster: Ipv4Net,
    mask: u8,
}

impl CidrSet {
    pub fn new(cluster: &str, mask: u8) -> Result<CidrSet, CidrError> {
        let cluster = Ipv4Net::parse(cluster)?;
        if mask < cluster.prefix || mask > 32 {
            return Err(CidrError::MaskTooSmall {
                cidr: cluster.to_string(),
                mask,
            });
        }
        Ok(CidrSet { cluster, mask })
    }

    fn count(&self) -> u64 {
        1u64 << (self.mask - self.cluster.prefix)
    }

    fn nth(&self, i: u64) -> Ipv4Net {
        let base = u32::from(self.cluster.addr) as u64;
        let size = 1u64 << (32 - self.mask);
        Ipv4Net {
            addr: Ipv4Addr::from((base + i * size) as u32),
            prefix: self.mask,
        }
    }

    /// Index of a subnet of this set, if it is one (another node's podCIDR outside the cluster
    /// CIDR is ignored).
    fn index_of(&self, net: &Ipv4Net) -> Option<u64> {
        if net.prefix != self.mask {
            return None;
        }
        let base = u32::from(self.cluster.addr) as u64;
        let addr = u32::from(net.addr) as u64;
        let size = 1u64 << (32 - self.mask);
        (addr >= base && addr < base + self.count() * size).then(|| (addr - base) / size)
    }

    /// The lowest subnet not in `used` (podCIDR strings of the other nodes).
    pub fn allocate<'a>(
        &self,
        used: impl IntoIterator<Item = &'a str>,
    ) -> Result<Ipv4Net, CidrError> {
        let taken: BTreeSet<u64> = used
            .into_iter()
            .filter_map(|s| Ipv4Net::parse(s).ok())
            .filter_map(|n| self.index_of(&n))
            .collect();
        (0..self.count())
            .find(|i| !taken.contains(i))
            .map(|i| self.nth(i))
            .ok_or_else(|| CidrError::Full(self.cluster.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_lowest_free_subnet() {
        let set = CidrSet::new("10.244.0.0/16", 24).unwrap();
        assert_eq!(set.allocate([]).unwrap().to_string(), "10.244.0.0/24");
        assert_eq!(
            set.allocate(["10.244.0.0/24", "10.244.2.0/24"])
                .unwrap()
                .to_string(),
            "10.244.1.0/24"
        );
        // Foreign or malformed CIDRs do not block anything.
        assert_eq!(
            set.allocate(["192.168.0.0/24", "junk"])
                .unwrap()
                .to_string(),
            "10.244.0.0/24"
        );
    }

    #[test]
    fn full_and_invalid() {
        let set = CidrSet::new("10.0.0.0/30", 31).unwrap();
        assert_eq!(
            set.allocate(["10.0.0.0/31", "10.0.0.2/31"]),
            Err(CidrError::Full("10.0.0.0/30".into()))
        );
        assert!(CidrSet::new("10.244.0.0/16", 8).is_err());
        assert!(Ipv4Net::parse("10.244.0.0").is_err());
        assert_eq!(
            Ipv4Net::parse("10.244.3.7/16").unwrap().to_string(),
            "10.244.0.0/16"
        );
    }
}
