//! S-CL3 over TLS with client certificates and etcd authentication: the `[cluster.etcd]`
//! options `ca_file`, `cert_file`, `key_file`, `username` and `password` against a real
//! etcd that requires all of them.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};

use super::etcd::Etcd;
use super::nodes::{Backends, PREFIX, backends, config, start_node, wait_until};
use super::ports::free_port;

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("lb-etcd-pki-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        for (name, usage) in [
            ("server", ExtendedKeyUsagePurpose::ServerAuth),
            ("client", ExtendedKeyUsagePurpose::ClientAuth),
        ] {
            let key = KeyPair::generate().unwrap();
            let mut params =
                CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()]).unwrap();
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &ca).unwrap();
            std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
        }
        Pki { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node's configuration for the TLS etcd with `password`.
fn secure_config(
    name: &str,
    api: u16,
    etcd: &Etcd,
    b: &Backends,
    pki: &Pki,
    password: &str,
) -> String {
    let path = |f: &str| pki.file(f).display().to_string();
    config(name, api, etcd.port, b, false)
        .replace("http://127.0.0.1", "https://127.0.0.1")
        .replace(
            "timeout = 2\n",
            &format!(
                "timeout = 2\nusername = \"lb\"\npassword = \"{password}\"\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
                path("ca.pem"),
                path("client.pem"),
                path("client.key")
            ),
        )
}

/// Turns authentication on: `root`, and `lb` with read-write access to the prefix only.
fn enable_auth(etcd: &mut Etcd) {
    etcd.etcdctl(&["user", "add", "root", "--new-user-password", "root-secret"]);
    etcd.etcdctl(&["user", "add", "lb", "--new-user-password", "lb-secret"]);
    etcd.etcdctl(&["role", "add", "lb"]);
    etcd.etcdctl(&[
        "role",
        "grant-permission",
        "lb",
        "--prefix=true",
        "readwrite",
        PREFIX,
    ]);
    etcd.etcdctl(&["user", "grant-role", "lb", "lb"]);
    etcd.etcdctl(&["auth", "enable"]);
    etcd.ctl_args(&["--user", "root:root-secret"]);
}

/// S-CL3: a node with the right CA, client certificate, user and password follows etcd and
/// publishes through it; one with a wrong password says etcd refused it and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_tls_client_certificates_and_authentication() {
    let pki = Pki::new("tls");
    let mut etcd = Etcd::start_tls(
        "tls",
        &pki.file("ca.pem"),
        (&pki.file("server.pem"), &pki.file("server.key")),
        (&pki.file("client.pem"), &pki.file("client.key")),
    );
    enable_auth(&mut etcd);
    let b = backends().await;
    let api = free_port();
    let good = start_node(
        "s1",
        api,
        secure_config("s1", api, &etcd, &b, &pki, "lb-secret"),
    )
    .await;
    wait_until("joined over TLS with a password", 10, || async {
        good.applied().await > 0
    })
    .await;
    let r = good.maintenance("b1", true).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (stored, _) = etcd.get(&format!("{PREFIX}/config")).unwrap();
    assert!(stored.contains("maintenance = true"), "{stored}");

    let api = free_port();
    let bad = start_node(
        "s2",
        api,
        secure_config("s2", api, &etcd, &b, &pki, "wrong"),
    )
    .await;
    wait_until("says etcd refused it", 10, || async {
        let st = bad.status().await;
        st["store_reachable"] == false
            && st["store_error"]
                .as_str()
                .is_some_and(|e| e.contains("authentication failed"))
    })
    .await;
    assert_eq!(
        bad.get("/api/v1/backends/b1").await.status,
        200,
        "it serves its own file"
    );
    assert!(!bad.flag("b1", "maintenance").await);
    good.shutdown().await;
    bad.shutdown().await;
}
