//! Clients' certificates under mutual TLS: rustls's verifier (webpki: the chain to a root, its
//! validity, its key usages), and for a certificate of X.509 version 1 the check webpki cannot
//! make, since it refuses that version: OpenSSL's `x509 -req` makes such certificates, Triton
//! accepts them, and its own TLS QA (`L0_secure_grpc`) presents one. A version-1 certificate has
//! no extensions, so there is nothing to check but that a root's key signed it and that it is
//! within its validity; it is accepted when issued by a root directly (no intermediates), and
//! its handshake signature is checked with its key, as rustls checks a raw public key's.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{
    CryptoProvider, WebPkiSupportedAlgorithms, verify_tls13_signature_with_raw_key,
};
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

use super::x509::{Certificate, key_parts};

/// A root's name and key, for version-1 certificates.
#[derive(Debug)]
struct Root {
    subject: Vec<u8>,
    key_algorithm: Vec<u8>,
    key: Vec<u8>,
}

/// The verifier of clients' certificates (module docs).
#[derive(Debug)]
pub struct ClientCertificates {
    webpki: Arc<dyn ClientCertVerifier>,
    roots: Vec<Root>,
    algorithms: WebPkiSupportedAlgorithms,
    /// Whether a client must present a certificate; one that does is verified either way.
    mandatory: bool,
}

impl ClientCertificates {
    pub fn new(
        roots: &[CertificateDer<'static>],
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, String> {
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store.add(root.clone()).map_err(|e| e.to_string())?;
        }
        let algorithms = provider.signature_verification_algorithms;
        let webpki = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .map_err(|e| e.to_string())?;
        let roots = roots
            .iter()
            .filter_map(|root| {
                let cert = Certificate::parse(root.as_ref())?;
                let (key_algorithm, key) = key_parts(cert.public_key_info)?;
                Some(Root {
                    subject: cert.subject.to_vec(),
                    key_algorithm: key_algorithm.to_vec(),
                    key: key.to_vec(),
                })
            })
            .collect();
        Ok(ClientCertificates {
            webpki,
            roots,
            algorithms,
            mandatory: true,
        })
    }

    /// The same verifier, for a port where a client may also come without a certificate (the
    /// admin port's probes); a certificate presented is still verified, and a bad one refused.
    pub fn optional(self) -> Self {
        ClientCertificates {
            mandatory: false,
            ..self
        }
    }

    fn verify_version_1(
        &self,
        cert: &Certificate<'_>,
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now < cert.not_before {
            return Err(CertificateError::NotValidYet.into());
        }
        if now > cert.not_after {
            return Err(CertificateError::Expired.into());
        }
        let issuers: Vec<&Root> = self
            .roots
            .iter()
            .filter(|root| root.subject == cert.issuer)
            .collect();
        if issuers.is_empty() {
            return Err(CertificateError::UnknownIssuer.into());
        }
        let signed = issuers.iter().any(|root| {
            self.algorithms.all.iter().any(|algorithm| {
                algorithm.signature_alg_id().as_ref() == cert.signature_algorithm
                    && algorithm.public_key_alg_id().as_ref() == root.key_algorithm.as_slice()
                    && algorithm
                        .verify_signature(&root.key, cert.tbs, cert.signature)
                        .is_ok()
            })
        });
        if signed {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(CertificateError::BadSignature.into())
        }
    }
}

/// A version-1 certificate's SubjectPublicKeyInfo; none for any other.
fn version_1_key<'a>(cert: &'a CertificateDer<'_>) -> Option<&'a [u8]> {
    Certificate::parse(cert.as_ref())
        .filter(|c| c.version_1)
        .map(|c| c.public_key_info)
}

impl ClientCertVerifier for ClientCertificates {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        match Certificate::parse(end_entity.as_ref()) {
            Some(cert) if cert.version_1 => self.verify_version_1(&cert, now),
            _ => self
                .webpki
                .verify_client_cert(end_entity, intermediates, now),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        let Some(spki) = version_1_key(cert) else {
            return self.webpki.verify_tls12_signature(message, cert, dss);
        };
        let (key_algorithm, key) = key_parts(spki).ok_or(CertificateError::BadEncoding)?;
        let candidates = self
            .algorithms
            .mapping
            .iter()
            .filter(|(scheme, _)| *scheme == dss.scheme)
            .flat_map(|(_, algorithms)| algorithms.iter());
        for algorithm in candidates {
            if algorithm.public_key_alg_id().as_ref() == key_algorithm
                && algorithm
                    .verify_signature(key, message, dss.signature())
                    .is_ok()
            {
                return Ok(HandshakeSignatureValid::assertion());
            }
        }
        Err(Error::InvalidCertificate(CertificateError::BadSignature))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match version_1_key(cert) {
            Some(spki) => verify_tls13_signature_with_raw_key(
                message,
                &SubjectPublicKeyInfoDer::from(spki),
                dss,
                &self.algorithms,
            ),
            None => self.webpki.verify_tls13_signature(message, cert, dss),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
