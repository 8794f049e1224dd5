//! kiln-proxy: Services in nftables, routes to other hosts pod CIDRs.
