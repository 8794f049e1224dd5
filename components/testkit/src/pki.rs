//! A throwaway CA issuing serving and client certificates (kubeadm semantics: CN = user, O = groups).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// PEM cert + key.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// A test CA; every certificate it issues is valid for the cluster the harness starts.
pub struct Pki {
    pub ca: Pair,
    issuer: Issuer<'static, KeyPair>,
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

impl Pki {
    pub fn new() -> Pki {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kiln-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let ca = Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        Pki {
            ca,
            issuer: Issuer::new(params, key),
        }
    }

    pub fn serving(&self) -> Pair {
        self.serving_as("kube-apiserver")
    }

    /// A serving certificate for 127.0.0.1 / localhost.
    pub fn serving_as(&self, cn: &str) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params.distinguished_name.push(DnType::CommonName, cn);
        // etcd also dials itself (its gRPC gateway) with its serving certificate.
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A client certificate: CN = user, O = groups.
    pub fn client(&self, user: &str, groups: &[&str]) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}
