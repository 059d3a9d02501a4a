//! TLS handshakes against a client port's mutual-TLS configuration, as the sidecar builds it
//! (`infergate_sidecar::tls::Tls`: rustls with the ring provider, and the sidecar's own verifier
//! of clients' certificates, which reads X.509 version-1 certificates with a DER walk of its
//! own, `tls/x509.rs`, and checks their signatures against the roots' keys).
//!
//! The first byte chooses what the rest is:
//! - even: bytes a client sends, fed to the server connection as they come. Checked: nothing
//!   panics, and no handshake completes (finishing one takes the client's keys).
//! - odd: a certificate chain (each certificate a 2-byte big-endian length, then its DER) that a
//!   real rustls client presents, signing with the genuine client key that matches its first
//!   certificate. Checked: the server accepts a chain only if its first certificate is one of
//!   the genuine client certificates (`tls_handshake/`: version 3, and version 1 as OpenSSL's
//!   `x509 -req` makes it), which only the CA could sign; and it does accept those, presented
//!   alone.
//!
//! The certificates (ECDSA P-256, a CA, a server certificate for `localhost`, two client
//! certificates, valid until 2126) were made with openssl for this target; they protect nothing.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use infergate_sidecar::tls::{Tls, TlsFiles};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::{CertifiedKey, SigningKey};
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection, SignatureScheme};

const CA: &str = include_str!("tls_handshake/ca.pem");
const SERVER_CERT: &str = include_str!("tls_handshake/server.pem");
const SERVER_KEY: &str = include_str!("tls_handshake/server.key");
const CLIENT_CERT: &str = include_str!("tls_handshake/client.pem");
const CLIENT_KEY: &str = include_str!("tls_handshake/client.key");
const CLIENT_V1_CERT: &str = include_str!("tls_handshake/client-v1.pem");
const CLIENT_V1_KEY: &str = include_str!("tls_handshake/client-v1.key");

/// Rounds of the in-memory handshake before giving up (a handshake takes a few).
const MAX_ROUNDS: usize = 16;

struct Fixture {
    server: Arc<ServerConfig>,
    /// The genuine client certificates, each with its key.
    clients: Vec<(CertificateDer<'static>, Arc<dyn SigningKey>)>,
    root: rustls::RootCertStore,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        // The port loads its files as the sidecar does: written once to a directory of this
        // process's own.
        let dir = std::env::temp_dir().join(format!("infergate-fuzz-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let write = |name: &str, text: &str| -> PathBuf {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("a certificate file");
            path
        };
        let files = TlsFiles {
            cert: write("server.pem", SERVER_CERT),
            key: write("server.key", SERVER_KEY),
            root: Some(write("ca.pem", CA)),
            mutual: true,
        };
        let tls = Tls::load(files, &["h2"]).expect("the port's TLS loads");
        let server = tls.acceptor().config().clone();
        let provider = rustls::crypto::ring::default_provider();
        let client = |cert: &str, key: &str| {
            let cert = CertificateDer::from_pem_slice(cert.as_bytes()).expect("a certificate");
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("a key");
            let key = provider
                .key_provider
                .load_private_key(key)
                .expect("a signing key");
            (cert, key)
        };
        let mut root = rustls::RootCertStore::empty();
        root.add(CertificateDer::from_pem_slice(CA.as_bytes()).expect("the CA"))
            .expect("the CA as a root");
        Fixture {
            server,
            clients: vec![
                client(CLIENT_CERT, CLIENT_KEY),
                client(CLIENT_V1_CERT, CLIENT_V1_KEY),
            ],
            root,
        }
    })
}

pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        client_bytes(rest);
    } else {
        presented_chain(rest);
    }
}

fn client_bytes(data: &[u8]) {
    let mut server = ServerConnection::new(fixture().server.clone()).expect("a server connection");
    let mut input = data;
    while !input.is_empty() {
        match server.read_tls(&mut input) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if server.process_new_packets().is_err() {
            break;
        }
        // What the server answers goes nowhere.
        while server.wants_write() {
            if server.write_tls(&mut std::io::sink()).is_err() {
                break;
            }
        }
    }
    assert!(
        server.is_handshaking(),
        "a handshake completed from bytes alone"
    );
}

/// Presents the certificates it is given, signing with the key it is given.
#[derive(Debug)]
struct Present(Arc<CertifiedKey>);

impl ResolvesClientCert for Present {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn chain(mut data: &[u8]) -> Vec<CertificateDer<'static>> {
    let mut certs = Vec::new();
    while let [high, low, rest @ ..] = data {
        let len = usize::from(u16::from_be_bytes([*high, *low])).min(rest.len());
        certs.push(CertificateDer::from(rest[..len].to_vec()));
        data = &rest[len..];
    }
    certs
}

fn presented_chain(data: &[u8]) {
    let fixture = fixture();
    let certs = chain(data);
    let Some(first) = certs.first() else {
        return;
    };
    let genuine = fixture.clients.iter().find(|(cert, _)| cert == first);
    // A genuine certificate is presented with its own key; anything else with the first one.
    let key = genuine.unwrap_or(&fixture.clients[0]).1.clone();
    let client_config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(fixture.root.clone())
            .with_client_cert_resolver(Arc::new(Present(Arc::new(CertifiedKey::new(
                certs.clone(),
                key,
            )))));
    let name = ServerName::try_from("localhost").expect("a name");
    let mut client =
        ClientConnection::new(Arc::new(client_config), name).expect("a client connection");
    let mut server = ServerConnection::new(fixture.server.clone()).expect("a server connection");
    let accepted = handshake(&mut client, &mut server);
    let chain_matches = server
        .peer_certificates()
        .is_some_and(|peer| peer.first() == Some(first));
    if accepted {
        assert!(
            genuine.is_some() && chain_matches,
            "the server accepted a client certificate the CA did not sign"
        );
    } else {
        // Alone, a genuine certificate is accepted (with more behind it, the chain may not be).
        assert!(
            genuine.is_none() || certs.len() > 1,
            "the server refused a genuine client certificate"
        );
    }
}

/// Runs the handshake in memory; whether the server completed it without error.
fn handshake(client: &mut ClientConnection, server: &mut ServerConnection) -> bool {
    for _ in 0..MAX_ROUNDS {
        let mut to_server = Vec::new();
        while client.wants_write() {
            if client.write_tls(&mut to_server).is_err() {
                return false;
            }
        }
        let mut reader = &to_server[..];
        while !reader.is_empty() {
            if server.read_tls(&mut reader).is_err() {
                return false;
            }
            if server.process_new_packets().is_err() {
                return false;
            }
        }
        let mut to_client = Vec::new();
        while server.wants_write() {
            if server.write_tls(&mut to_client).is_err() {
                return false;
            }
        }
        let mut reader = &to_client[..];
        while !reader.is_empty() {
            if client.read_tls(&mut reader).is_err() || client.process_new_packets().is_err() {
                // The client gave up (it refuses nothing the server sends here, but a fuzzed
                // chain can make it fail to sign); the server saw no completed handshake.
                return !server.is_handshaking();
            }
        }
        if !server.is_handshaking() && !client.is_handshaking() {
            // Data both ways proves the keys agree.
            let _ = client.writer().write_all(b"ping");
            let mut to_server = Vec::new();
            let _ = client.write_tls(&mut to_server);
            let mut reader = &to_server[..];
            return server.read_tls(&mut reader).is_ok()
                && server.process_new_packets().is_ok()
                && {
                    let mut got = [0u8; 4];
                    server.reader().read_exact(&mut got).is_ok() && &got == b"ping"
                };
        }
        if to_server.is_empty() && to_client.is_empty() {
            return false;
        }
    }
    false
}
