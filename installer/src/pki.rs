//! A small typed PKI for the certificates KubeXM makes on the control host (etcd, the registry,
//! and the Kubernetes components of `kubernetes.type: kubexm`).
//!
//! * [`Ca::load_or_create`] keeps a CA as `<dir>/<name>-ca.crt` + `<dir>/<name>-ca.key` so
//!   re-runs reuse it (10 years, ECDSA P-256).
//! * [`Ca::issue`] signs a leaf from a [`CertSpec`] (CN, O, SANs, usage, validity).
//! * [`Ca::load_or_issue`] keeps leaves as `<dir>/<stem>.crt` + `<dir>/<stem>.key` and issues a
//!   new one only when the stored one no longer matches the spec (CN, O, SANs, usages), was not
//!   signed by this CA, does not match its key, or expires within [`RENEW_BEFORE_DAYS`] days.
//!   So a re-run uploads byte-identical files and the upload steps are skipped.
//! * [`load_or_create_key`] keeps a bare key pair (the service-account signing key) the same way.
//!
//! Keys are written 0600 and every file atomically (temporary file + rename in the same
//! directory).
//!
//! **Planning writes nothing**: modules build their certificates when their tasks are built,
//! which `plan` and `--dry-run` do too. They go through a [`KeyDir`], whose [`Keys`] mode says
//! whether what is missing is kept ([`Keys::Keep`], only when a pipeline is executed) or made in
//! memory and dropped ([`Keys::Plan`]); existing files are read in both modes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// CA lifetime.
pub const CA_VALIDITY_DAYS: u32 = 3650;
/// Default leaf lifetime.
pub const LEAF_VALIDITY_DAYS: u32 = 365;
/// A stored leaf expiring within this many days is re-issued.
pub const RENEW_BEFORE_DAYS: i64 = 30;

/// A PKI operation failed; names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file could not be read or written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A stored key or certificate could not be parsed.
    #[error("{}: {message} (delete it to have KubeXM make a new one)", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Only one of a CA's certificate and key exists.
    #[error("{} exists but {} does not: restore it, or delete both to make a new CA (every certificate it signed must then be re-issued)", present.display(), missing.display())]
    Incomplete {
        /// The file found.
        present: PathBuf,
        /// The file missing.
        missing: PathBuf,
    },
    /// A CA rotation is in progress and its state could not be read, or contradicts the files.
    #[error("the CA rotation in progress")]
    Rotation(#[from] crate::rotation::RotationError),
    /// rcgen refused the parameters (a bad SAN, for example).
    #[error("certificate {name}")]
    Generate {
        /// Common name or file stem.
        name: String,
        /// rcgen's error.
        source: rcgen::Error,
    },
}

/// A subject alternative name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum San {
    /// A DNS name.
    Dns(String),
    /// An IP address.
    Ip(IpAddr),
}

impl San {
    /// An IP when `s` parses as one, else a DNS name.
    pub fn parse(s: &str) -> Self {
        s.parse::<IpAddr>()
            .map_or_else(|_| San::Dns(s.to_string()), San::Ip)
    }
}

/// Extended key usages of a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// serverAuth.
    Server,
    /// clientAuth.
    Client,
    /// serverAuth and clientAuth (etcd peers and members).
    Peer,
}

impl Usage {
    fn server(self) -> bool {
        matches!(self, Usage::Server | Usage::Peer)
    }
    fn client(self) -> bool {
        matches!(self, Usage::Client | Usage::Peer)
    }
}

/// What a leaf certificate says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSpec {
    /// Subject CN.
    pub common_name: String,
    /// Subject O (Kubernetes reads it as the group).
    pub organization: Option<String>,
    /// Subject alternative names.
    pub sans: Vec<San>,
    /// Extended key usages.
    pub usage: Usage,
    /// Lifetime in days.
    pub validity_days: u32,
}

impl CertSpec {
    /// A spec with no O, no SANs and the default lifetime.
    pub fn new(common_name: impl Into<String>, usage: Usage) -> Self {
        Self {
            common_name: common_name.into(),
            organization: None,
            sans: Vec::new(),
            usage,
            validity_days: LEAF_VALIDITY_DAYS,
        }
    }

    /// Adds SANs.
    #[must_use]
    pub fn sans(mut self, sans: impl IntoIterator<Item = San>) -> Self {
        for s in sans {
            if !self.sans.contains(&s) {
                self.sans.push(s);
            }
        }
        self
    }

    /// Sets O.
    #[must_use]
    pub fn organization(mut self, o: impl Into<String>) -> Self {
        self.organization = Some(o.into());
        self
    }
}

/// A certificate and its private key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// The certificate.
    pub cert_pem: String,
    /// Its PKCS#8 private key.
    pub key_pem: String,
}

/// A signing key pair without a certificate (the Kubernetes service-account token key), PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFiles {
    /// The private key (PKCS#8).
    pub private_pem: String,
    /// The public key (SubjectPublicKeyInfo, `PUBLIC KEY`).
    pub public_pem: String,
}

/// A private key from PEM: PKCS#8 (`PRIVATE KEY`, what KubeXM writes) or an RSA key in PKCS#1
/// (`RSA PRIVATE KEY`, what kubeadm writes for its CAs), wrapped into PKCS#8 here since the
/// signing backend reads PKCS#8 only.
fn key_pair_from_pem(pem: &str) -> Result<KeyPair, rcgen::Error> {
    const BEGIN: &str = "-----BEGIN RSA PRIVATE KEY-----";
    const END: &str = "-----END RSA PRIVATE KEY-----";
    let Some(body) = pem
        .trim()
        .strip_prefix(BEGIN)
        .and_then(|b| b.strip_suffix(END))
    else {
        return KeyPair::from_pem(pem);
    };
    use base64::Engine as _;
    let b64: String = body.split_whitespace().collect();
    let pkcs1 = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| rcgen::Error::CouldNotParseKeyPair)?;
    KeyPair::try_from(rsa_pkcs1_to_pkcs8(&pkcs1).as_slice())
}

/// DER: a tag, its length, the content.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let n = content.len();
    let mut out = vec![tag];
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// PKCS#8 `PrivateKeyInfo` around an RSA `RSAPrivateKey` (RFC 5208, RFC 8017): version 0,
/// algorithm rsaEncryption with NULL parameters, the key as an OCTET STRING.
fn rsa_pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    const RSA_ALGORITHM: [u8; 15] = [
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let mut content = vec![0x02, 0x01, 0x00];
    content.extend_from_slice(&RSA_ALGORITHM);
    content.extend(der(0x04, pkcs1));
    der(0x30, &content)
}

/// Loads `<dir>/<stem>.key` (and writes `<dir>/<stem>.pub` beside it when missing), or creates
/// a new ECDSA P-256 key pair there; a re-run returns the same keys.
pub fn load_or_create_key(dir: &Path, stem: &str) -> Result<KeyFiles, PkiError> {
    key_pair(dir, stem, &Store::Disk)
}

fn key_pair(dir: &Path, stem: &str, store: &Store<'_>) -> Result<KeyFiles, PkiError> {
    let key_path = dir.join(format!("{stem}.key"));
    let pub_path = dir.join(format!("{stem}.pub"));
    let key = if store.exists(&key_path) {
        let pem = store.read(&key_path)?;
        key_pair_from_pem(&pem).map_err(|e| PkiError::Parse {
            path: key_path.clone(),
            message: format!("not a private key: {e}"),
        })?
    } else {
        let key = KeyPair::generate().map_err(gen_err(stem))?;
        store.write(&key_path, &key.serialize_pem(), 0o600)?;
        key
    };
    let files = KeyFiles {
        private_pem: key.serialize_pem(),
        public_pem: key.public_key_pem(),
    };
    if store.read(&pub_path).ok().as_deref() != Some(files.public_pem.as_str()) {
        store.write(&pub_path, &files.public_pem, 0o644)?;
    }
    Ok(files)
}

/// Whether keys, certificates and secrets that do not exist yet are kept on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// Executing a pipeline: create what is missing and keep it, so re-runs reuse it.
    Keep,
    /// Planning (`plan`, `--dry-run`): read what exists, make what is missing in memory only,
    /// write nothing.
    Plan,
}

/// A control-host directory of keys and certificates, and whether this run may write there.
///
/// In [`Keys::Plan`] mode what would be written is held in memory instead, shared by every
/// clone and [`KeyDir::join`] of this value: a plan that needs the same CA twice sees one CA,
/// as an executed run would.
#[derive(Clone)]
pub struct KeyDir {
    path: PathBuf,
    keys: Keys,
    planned: Arc<Mutex<BTreeMap<PathBuf, String>>>,
    reissue: Option<Reissue>,
    rotation: Option<Rotating>,
}

/// `rotate-ca`: the CA `name` seen as its rotation will be once `phase` finished (whatever the
/// state file says): what the phase being run distributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotating {
    /// The CA (`etcd`).
    pub name: String,
    /// The phase.
    pub phase: crate::rotation::Phase,
    /// The rotation's id (the new CA's common name carries it).
    pub id: i64,
}

/// `certs renew`: stored leaves to re-issue although they still match their spec.
///
/// A leaf is re-issued when it has fewer than `under_days` days left (or always with `all`)
/// and was issued before the renewal started (`since`, Unix seconds): a leaf this renewal
/// already issued (also in an earlier, resumed run of it) is kept, so building the tasks twice
/// or resuming issues each leaf once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reissue {
    /// Days-left threshold.
    pub under_days: i64,
    /// Every leaf, whatever its expiry.
    pub all: bool,
    /// When the renewal started.
    pub since: i64,
}

impl Reissue {
    /// Whether a leaf valid from `not_before` to `not_after` is re-issued at `now`. KubeXM's
    /// leaves start one hour before they are issued ([`Ca::issue`]).
    pub fn due(&self, not_before: i64, not_after: i64, now: i64) -> bool {
        let issued_before = not_before + 3600 < self.since;
        issued_before && (self.all || crate::certs::days_between(now, not_after) < self.under_days)
    }
}

impl std::fmt::Debug for KeyDir {
    // Never the planned keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyDir")
            .field("path", &self.path)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl KeyDir {
    /// `path` in `keys` mode.
    pub fn new(path: impl Into<PathBuf>, keys: Keys) -> Self {
        Self {
            path: path.into(),
            keys,
            planned: Arc::default(),
            reissue: None,
            rotation: None,
        }
    }

    /// The same directory (and mode, and planned files) re-issuing leaves as `reissue` says.
    #[must_use]
    pub fn with_reissue(&self, reissue: Reissue) -> Self {
        Self {
            reissue: Some(reissue),
            ..self.clone()
        }
    }

    /// The same directory (and mode, and planned files) with the CA `rotating.name` seen as
    /// `rotating.phase` leaves it ([`KeyDir::ca`]).
    #[must_use]
    pub fn with_rotation(&self, rotating: Rotating) -> Self {
        Self {
            rotation: Some(rotating),
            ..self.clone()
        }
    }

    /// The same directory in `keys` mode (what was planned in memory is dropped).
    #[must_use]
    pub fn with_keys(&self, keys: Keys) -> Self {
        Self::new(self.path.clone(), keys)
    }

    /// The mode.
    pub fn keys(&self) -> Keys {
        self.keys
    }

    fn store(&self) -> Store<'_> {
        match self.keys {
            Keys::Keep => Store::Disk,
            Keys::Plan => Store::Memory(&self.planned),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A subdirectory, same mode (and the same planned files).
    #[must_use]
    pub fn join(&self, sub: &str) -> Self {
        Self {
            path: self.path.join(sub),
            keys: self.keys,
            planned: self.planned.clone(),
            reissue: self.reissue,
            rotation: self.rotation.clone(),
        }
    }

    /// The phase the CA `name` is at: the one [`KeyDir::with_rotation`] gives, else the last
    /// one finished in its state file; `None` when no rotation of it is under way.
    pub fn rotation_phase(&self, name: &str) -> Result<Option<crate::rotation::Phase>, PkiError> {
        if let Some(r) = self.rotation.as_ref().filter(|r| r.name == name) {
            return Ok(Some(r.phase));
        }
        Ok(crate::rotation::Files::new(&self.path, name)
            .load()?
            .map(|s| s.finished))
    }

    /// The CA `<name>-ca.crt` + `.key` ([`Ca::load_or_create`]; kept only in [`Keys::Keep`]).
    ///
    /// During a rotation of it ([`crate::rotation`]; the phase given by
    /// [`KeyDir::with_rotation`], else the last one finished in its state file) the CA returned
    /// signs with the old or the new CA and its [`Ca::trust_pem`] is the bundle the phase
    /// distributes. Only the `new` phase makes the new CA; later phases refuse when it is gone.
    pub fn ca(&self, name: &str, common_name: &str) -> Result<Ca, PkiError> {
        use crate::rotation::{self, Files, Phase};
        let files = Files::new(&self.path, name);
        let (phase, id) = match &self.rotation {
            Some(r) if r.name == name => (r.phase, r.id),
            _ => match files.load()? {
                Some(s) => (s.finished, s.id),
                None => return Ca::load_or_make(&self.path, name, common_name, &self.store()),
            },
        };
        let store = self.store();
        let next_exists = store.exists(&files.next_crt) || store.exists(&files.next_key);
        if !next_exists && phase == Phase::DropOld {
            // Finalized: the new CA is already the one in use.
            return Ca::load_or_make(&self.path, name, common_name, &store);
        }
        let old = Ca::load_or_make(&self.path, name, common_name, &store)?;
        if !next_exists && phase != Phase::New {
            return Err(rotation::RotationError::Inconsistent {
                name: name.to_string(),
                message: format!(
                    "phase {phase} needs the new CA `{}`, which does not exist",
                    files.next_crt.display()
                ),
            }
            .into());
        }
        let next_cn = rotation::next_common_name(common_name, id);
        let next = Ca::load_or_make(&self.path, &rotation::next_name(name), &next_cn, &store)?;
        let mut trusted = Vec::new();
        if phase.trusts_old() {
            trusted.push(old.cert_pem.as_str());
        }
        if phase.trusts_new() {
            trusted.push(next.cert_pem.as_str());
        }
        let trust_pem = rotation::bundle(trusted);
        let mut ca = if phase.signs_with_new() { next } else { old };
        ca.trust_pem = trust_pem;
        Ok(ca)
    }

    /// The leaf `<stem>.crt` + `.key` signed by `ca` ([`Ca::load_or_issue`]; kept only in
    /// [`Keys::Keep`]).
    pub fn leaf(&self, ca: &Ca, stem: &str, spec: &CertSpec) -> Result<IssuedCert, PkiError> {
        ca.load_or_make_leaf(&self.path, stem, spec, &self.store(), self.reissue.as_ref())
    }

    /// The key pair `<stem>.key` + `.pub` ([`load_or_create_key`]; kept only in [`Keys::Keep`]).
    pub fn key_pair(&self, stem: &str) -> Result<KeyFiles, PkiError> {
        key_pair(&self.path, stem, &self.store())
    }

    /// The secret in file `name` ([`load_or_create_secret`]; kept only in [`Keys::Keep`]).
    pub fn secret(&self, name: &str) -> Result<String, PkiError> {
        secret(&self.path.join(name), &self.store())
    }
}

/// Where keys are read from and written to: the disk, or (planning) memory over the disk.
enum Store<'a> {
    Disk,
    Memory(&'a Mutex<BTreeMap<PathBuf, String>>),
}

impl Store<'_> {
    fn exists(&self, path: &Path) -> bool {
        match self {
            Store::Disk => path.exists(),
            Store::Memory(m) => m.lock().is_ok_and(|m| m.contains_key(path)) || path.exists(),
        }
    }

    fn read(&self, path: &Path) -> Result<String, PkiError> {
        if let Store::Memory(m) = self {
            if let Some(text) = m.lock().ok().and_then(|m| m.get(path).cloned()) {
                return Ok(text);
            }
        }
        read(path)
    }

    fn write(&self, path: &Path, content: &str, mode: u32) -> Result<(), PkiError> {
        match self {
            Store::Disk => write_atomic(path, content.as_bytes(), mode),
            Store::Memory(m) => {
                if let Ok(mut m) = m.lock() {
                    m.insert(path.to_path_buf(), content.to_string());
                }
                Ok(())
            }
        }
    }
}

/// A PEM certificate's validity (`notBefore`, `notAfter`, Unix seconds).
fn validity(pem: &str) -> Option<(i64, i64)> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    let v = cert.validity();
    Some((v.not_before.timestamp(), v.not_after.timestamp()))
}

/// A certificate authority loaded from (or created in) a directory.
pub struct Ca {
    cert_pem: String,
    /// What the places that trust this CA get: its certificate, or during a rotation the
    /// bundle of the old and new CAs ([`KeyDir::ca`]).
    trust_pem: String,
    cert_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

fn gen_err(name: &str) -> impl FnOnce(rcgen::Error) -> PkiError + '_ {
    move |source| PkiError::Generate {
        name: name.to_string(),
        source,
    }
}

fn read(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `content` to `path` atomically with `mode`, in a private (0700) directory: it holds keys.
fn write_atomic(path: &Path, content: &[u8], mode: u32) -> Result<(), PkiError> {
    crate::private_dir::write_private_file(path, content, mode).map_err(|source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_pem_der(path: &Path, pem: &str) -> Result<Vec<u8>, PkiError> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| PkiError::Parse {
        path: path.to_path_buf(),
        message: format!("not a PEM certificate: {e}"),
    })?;
    Ok(p.contents)
}

/// A generated password kept at `path` (0600): read when present, else 32 random hex digits
/// written there, so re-runs use the same value (e.g. Harbor's database password, which Harbor
/// keeps from its first start).
pub fn load_or_create_secret(path: &Path) -> Result<String, PkiError> {
    secret(path, &Store::Disk)
}

fn secret(path: &Path, store: &Store<'_>) -> Result<String, PkiError> {
    if store.exists(path) {
        let text = store.read(path)?;
        let value = text.trim();
        if value.is_empty() {
            return Err(PkiError::Parse {
                path: path.to_path_buf(),
                message: "empty secret".to_string(),
            });
        }
        return Ok(value.to_string());
    }
    let mut bytes = [0u8; 16];
    {
        use std::io::Read as _;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|source| PkiError::Io {
                path: PathBuf::from("/dev/urandom"),
                source,
            })?;
    }
    let value = hex::encode(bytes);
    store.write(path, &format!("{value}\n"), 0o600)?;
    Ok(value)
}

impl Ca {
    /// Loads `<dir>/<name>-ca.crt` and `-ca.key`, or creates them (CN `common_name`, 10 years).
    pub fn load_or_create(dir: &Path, name: &str, common_name: &str) -> Result<Self, PkiError> {
        Self::load_or_make(dir, name, common_name, &Store::Disk)
    }

    fn load_or_make(
        dir: &Path,
        name: &str,
        common_name: &str,
        store: &Store<'_>,
    ) -> Result<Self, PkiError> {
        let crt = dir.join(format!("{name}-ca.crt"));
        let key = dir.join(format!("{name}-ca.key"));
        match (store.exists(&crt), store.exists(&key)) {
            (true, true) => Self::load(&crt, &key, store),
            (true, false) => Err(PkiError::Incomplete {
                present: crt,
                missing: key,
            }),
            (false, true) => Err(PkiError::Incomplete {
                present: key,
                missing: crt,
            }),
            (false, false) => {
                let ca = Self::create(common_name)?;
                // Key first: a crash in between leaves an Incomplete error, never a cert
                // without its key being silently replaced.
                store.write(&key, &ca.issuer.key().serialize_pem(), 0o600)?;
                store.write(&crt, &ca.cert_pem, 0o644)?;
                Ok(ca)
            }
        }
    }

    fn create(common_name: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate().map_err(gen_err(common_name))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + Duration::days(i64::from(CA_VALIDITY_DAYS));
        let cert = params.self_signed(&key).map_err(gen_err(common_name))?;
        Ok(Self {
            trust_pem: cert.pem(),
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            issuer: Issuer::new(params, key),
        })
    }

    fn load(crt: &Path, key: &Path, store: &Store<'_>) -> Result<Self, PkiError> {
        let cert_pem = store.read(crt)?;
        let key_pem = store.read(key)?;
        let key_pair = key_pair_from_pem(&key_pem).map_err(|e| PkiError::Parse {
            path: key.to_path_buf(),
            message: format!("not a private key: {e}"),
        })?;
        let cert_der = parse_pem_der(crt, &cert_pem)?;
        let issuer =
            Issuer::from_ca_cert_der(&cert_der.as_slice().into(), key_pair).map_err(|e| {
                PkiError::Parse {
                    path: crt.to_path_buf(),
                    message: format!("not a CA certificate: {e}"),
                }
            })?;
        let (_, x509) =
            x509_parser::parse_x509_certificate(&cert_der).map_err(|e| PkiError::Parse {
                path: crt.to_path_buf(),
                message: e.to_string(),
            })?;
        if x509.public_key().subject_public_key.data.as_ref() != issuer.key().public_key_raw() {
            return Err(PkiError::Parse {
                path: key.to_path_buf(),
                message: format!("does not match {}", crt.display()),
            });
        }
        Ok(Self {
            trust_pem: cert_pem.clone(),
            cert_pem,
            cert_der,
            issuer,
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// What the places that trust this CA get (the CA file on the nodes, kubeconfigs'
    /// `certificate-authority-data`): the certificate, or during a rotation the old and new
    /// CAs ([`crate::rotation`]).
    pub fn trust_pem(&self) -> &str {
        &self.trust_pem
    }

    /// The CA's private key, PEM (PKCS#8). Only for a component that signs with it (the
    /// Kubernetes controller-manager's CSR signer).
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// Issues a new leaf (new key) for `spec`.
    pub fn issue(&self, spec: &CertSpec) -> Result<IssuedCert, PkiError> {
        let name = spec.common_name.as_str();
        let key = KeyPair::generate().map_err(gen_err(name))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        if let Some(o) = &spec.organization {
            dn.push(DnType::OrganizationName, o.as_str());
        }
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.subject_alt_names = spec
            .sans
            .iter()
            .map(|s| match s {
                San::Dns(d) => d
                    .clone()
                    .try_into()
                    .map(SanType::DnsName)
                    .map_err(gen_err(name)),
                San::Ip(ip) => Ok(SanType::IpAddress(*ip)),
            })
            .collect::<Result<_, _>>()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        if spec.usage.server() {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if spec.usage.client() {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        params.use_authority_key_identifier_extension = true;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::hours(1);
        params.not_after = now + Duration::days(i64::from(spec.validity_days));
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(gen_err(name))?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The leaf stored as `<dir>/<stem>.crt` + `.key` when it still matches `spec` (and this
    /// CA, and is not about to expire); otherwise a new one, stored there.
    pub fn load_or_issue(
        &self,
        dir: &Path,
        stem: &str,
        spec: &CertSpec,
    ) -> Result<IssuedCert, PkiError> {
        self.load_or_make_leaf(dir, stem, spec, &Store::Disk, None)
    }

    fn load_or_make_leaf(
        &self,
        dir: &Path,
        stem: &str,
        spec: &CertSpec,
        store: &Store<'_>,
        reissue: Option<&Reissue>,
    ) -> Result<IssuedCert, PkiError> {
        let crt = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        if store.exists(&crt) && store.exists(&key) {
            let stored = IssuedCert {
                cert_pem: store.read(&crt)?,
                key_pem: store.read(&key)?,
            };
            let forced = reissue.is_some_and(|r| {
                validity(&stored.cert_pem).is_some_and(|(from, until)| {
                    r.due(from, until, OffsetDateTime::now_utc().unix_timestamp())
                })
            });
            if !forced && self.still_valid(&stored, spec) {
                return Ok(stored);
            }
        }
        let issued = self.issue(spec)?;
        store.write(&key, &issued.key_pem, 0o600)?;
        store.write(&crt, &issued.cert_pem, 0o644)?;
        Ok(issued)
    }

    /// Whether a stored leaf can be kept for `spec`. Anything unreadable means "no".
    fn still_valid(&self, stored: &IssuedCert, spec: &CertSpec) -> bool {
        let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(stored.cert_pem.as_bytes()) else {
            return false;
        };
        let Ok(cert) = pem.parse_x509() else {
            return false;
        };
        let Ok((_, ca)) = x509_parser::parse_x509_certificate(&self.cert_der) else {
            return false;
        };
        if cert.verify_signature(Some(ca.public_key())).is_err() {
            return false;
        }
        let Ok(key) = key_pair_from_pem(&stored.key_pem) else {
            return false;
        };
        if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return false;
        }
        let renew_at = OffsetDateTime::now_utc() + Duration::days(RENEW_BEFORE_DAYS);
        if cert.validity().not_after.timestamp() <= renew_at.unix_timestamp() {
            return false;
        }
        let attr = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
            it.map(|a| a.as_str().map(str::to_string))
                .collect::<Result<Vec<_>, _>>()
                .ok()
        };
        let cn = attr(&mut cert.subject().iter_common_name());
        if cn != Some(vec![spec.common_name.clone()]) {
            return false;
        }
        let o = attr(&mut cert.subject().iter_organization());
        if o != Some(spec.organization.iter().cloned().collect()) {
            return false;
        }
        let sans: Option<BTreeSet<San>> = match cert.subject_alternative_name() {
            Ok(None) => Some(BTreeSet::new()),
            Ok(Some(ext)) => ext
                .value
                .general_names
                .iter()
                .map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(d) => {
                        Some(San::Dns(d.to_string()))
                    }
                    x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                        4 => <[u8; 4]>::try_from(*b).ok().map(|a| San::Ip(a.into())),
                        16 => <[u8; 16]>::try_from(*b).ok().map(|a| San::Ip(a.into())),
                        _ => None,
                    },
                    _ => None,
                })
                .collect(),
            Err(_) => None,
        };
        if sans != Some(spec.sans.iter().cloned().collect()) {
            return false;
        }
        match cert.extended_key_usage() {
            Ok(Some(eku)) => {
                eku.value.server_auth == spec.usage.server()
                    && eku.value.client_auth == spec.usage.client()
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn openssl(args: &[&str]) -> (bool, String) {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl is installed");
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), s)
    }

    fn member_spec() -> CertSpec {
        CertSpec::new("etcd-node1", Usage::Peer).sans([
            San::parse("node1"),
            San::parse("10.0.0.11"),
            San::parse("127.0.0.1"),
            San::parse("localhost"),
        ])
    }

    #[test]
    fn issued_certs_verify_and_carry_sans_and_usages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::load_or_create(dir.path(), "etcd", "etcd-ca").expect("ca");
        let cases = [
            (
                member_spec(),
                "TLS Web Server Authentication, TLS Web Client Authentication",
            ),
            (
                CertSpec::new("kube-apiserver-etcd-client", Usage::Client)
                    .organization("system:masters"),
                "TLS Web Client Authentication",
            ),
            (
                CertSpec::new("srv", Usage::Server).sans([San::parse("srv.example")]),
                "TLS Web Server Authentication",
            ),
        ];
        for (i, (spec, eku)) in cases.iter().enumerate() {
            let leaf = ca
                .load_or_issue(dir.path(), &format!("leaf{i}"), spec)
                .expect("issue");
            let crt = dir.path().join(format!("leaf{i}.crt"));
            assert_eq!(std::fs::read_to_string(&crt).expect("crt"), leaf.cert_pem);
            let ca_crt = dir.path().join("etcd-ca.crt");
            let (ok, out) = openssl(&[
                "verify",
                "-CAfile",
                ca_crt.to_str().expect("utf-8"),
                crt.to_str().expect("utf-8"),
            ]);
            assert!(ok, "{out}");
            let (ok, text) = openssl(&[
                "x509",
                "-noout",
                "-text",
                "-in",
                crt.to_str().expect("utf-8"),
            ]);
            assert!(ok, "{text}");
            let usage_line = text
                .lines()
                .skip_while(|l| !l.contains("X509v3 Extended Key Usage"))
                .nth(1)
                .expect("extended key usage")
                .trim()
                .to_string();
            assert_eq!(usage_line, *eku, "{text}");
            assert!(
                text.contains(&format!("CN = {}", spec.common_name))
                    || text.contains(&format!("CN={}", spec.common_name)),
                "{text}"
            );
            if let Some(o) = &spec.organization {
                assert!(text.contains(&format!("O = {o}")), "{text}");
            }
        }
        let text = openssl(&[
            "x509",
            "-noout",
            "-ext",
            "subjectAltName",
            "-in",
            dir.path().join("leaf0.crt").to_str().expect("utf-8"),
        ])
        .1;
        assert!(
            text.contains("DNS:node1, IP Address:10.0.0.11, IP Address:127.0.0.1, DNS:localhost"),
            "{text}"
        );
        // The key matches the certificate.
        let (ok, modulus) = openssl(&[
            "pkey",
            "-pubout",
            "-in",
            dir.path().join("leaf0.key").to_str().expect("utf-8"),
        ]);
        assert!(ok, "{modulus}");
        let (ok, from_cert) = openssl(&[
            "x509",
            "-noout",
            "-pubkey",
            "-in",
            dir.path().join("leaf0.crt").to_str().expect("utf-8"),
        ]);
        assert!(ok);
        assert_eq!(modulus, from_cert);
    }

    #[test]
    fn ca_and_leaves_are_reused_and_keys_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::load_or_create(dir.path(), "etcd", "etcd-ca").expect("ca");
        let first = std::fs::read(dir.path().join("etcd-ca.crt")).expect("crt");
        let key_first = std::fs::read(dir.path().join("etcd-ca.key")).expect("key");
        let leaf = ca
            .load_or_issue(dir.path(), "member-node1", &member_spec())
            .expect("leaf");

        let again = Ca::load_or_create(dir.path(), "etcd", "etcd-ca").expect("ca again");
        assert_eq!(again.cert_pem().as_bytes(), first.as_slice());
        assert_eq!(
            std::fs::read(dir.path().join("etcd-ca.key")).expect("key"),
            key_first
        );
        let leaf_again = again
            .load_or_issue(dir.path(), "member-node1", &member_spec())
            .expect("leaf again");
        assert_eq!(leaf, leaf_again, "unchanged spec re-uses the stored cert");

        for f in ["etcd-ca.key", "member-node1.key"] {
            let mode = std::fs::metadata(dir.path().join(f))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".kubexm-pki"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left behind");
    }

    #[test]
    fn leaves_are_reissued_when_the_spec_or_ca_changes_or_they_expire_soon() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::load_or_create(dir.path(), "etcd", "etcd-ca").expect("ca");
        let base = ca
            .load_or_issue(dir.path(), "m", &member_spec())
            .expect("leaf");

        let more_sans = member_spec().sans([San::parse("10.0.0.99")]);
        let changed = ca.load_or_issue(dir.path(), "m", &more_sans).expect("sans");
        assert_ne!(base, changed, "a new SAN re-issues");
        let text = openssl(&[
            "x509",
            "-noout",
            "-ext",
            "subjectAltName",
            "-in",
            dir.path().join("m.crt").to_str().expect("utf-8"),
        ])
        .1;
        assert!(text.contains("10.0.0.99"), "{text}");
        assert_eq!(
            ca.load_or_issue(dir.path(), "m", &more_sans).expect("same"),
            changed
        );

        let mut client = more_sans.clone();
        client.usage = Usage::Client;
        let c = ca.load_or_issue(dir.path(), "m", &client).expect("usage");
        assert_ne!(c, changed, "a usage change re-issues");

        let mut renamed = client.clone();
        renamed.common_name = "other".into();
        let r = ca.load_or_issue(dir.path(), "m", &renamed).expect("cn");
        assert_ne!(r, c, "a CN change re-issues");

        let mut short = renamed.clone();
        short.validity_days = 200;
        let kept = ca.load_or_issue(dir.path(), "m", &short).expect("short");
        assert_eq!(kept, r, "the lifetime alone does not re-issue");

        // A stored cert expiring within 30 days is re-issued.
        short.validity_days = 10;
        let expiring = ca.issue(&short).expect("issue");
        std::fs::write(dir.path().join("m.crt"), &expiring.cert_pem).expect("crt");
        std::fs::write(dir.path().join("m.key"), &expiring.key_pem).expect("key");
        let renewed = ca.load_or_issue(dir.path(), "m", &renamed).expect("renew");
        assert_ne!(renewed, expiring, "an expiring cert is re-issued");

        let other_dir = tempfile::tempdir().expect("tempdir");
        let other_ca = Ca::load_or_create(other_dir.path(), "etcd", "etcd-ca").expect("ca2");
        let mine = ca.load_or_issue(dir.path(), "m", &renamed).expect("mine");
        assert_eq!(mine, renewed);
        let theirs = other_ca
            .load_or_issue(dir.path(), "m", &renamed)
            .expect("theirs");
        assert_ne!(mine, theirs, "a cert of another CA is re-issued");
    }

    #[test]
    fn a_key_pair_is_made_once_and_its_public_half_matches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = load_or_create_key(dir.path(), "sa").expect("key");
        assert!(first.public_pem.starts_with("-----BEGIN PUBLIC KEY-----"));
        let again = load_or_create_key(dir.path(), "sa").expect("again");
        assert_eq!(first, again, "a re-run returns the stored key");
        let (ok, derived) = openssl(&[
            "pkey",
            "-pubout",
            "-in",
            dir.path().join("sa.key").to_str().expect("utf-8"),
        ]);
        assert!(ok, "{derived}");
        assert_eq!(derived, first.public_pem);
        std::fs::write(dir.path().join("sa.key"), "garbage").expect("write");
        let err = load_or_create_key(dir.path(), "sa").expect_err("garbage");
        assert!(err.to_string().contains("sa.key"), "{err}");
    }

    #[test]
    fn a_rotation_signs_and_trusts_as_its_phase_says() {
        use crate::rotation::{Files, Phase, State};
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = KeyDir::new(dir.path(), Keys::Keep);
        let old = keys.ca("etcd", "etcd-ca").expect("old");
        let leaf = keys.leaf(&old, "m", &member_spec()).expect("leaf");
        let rotating = |phase| {
            keys.with_rotation(Rotating {
                name: "etcd".into(),
                phase,
                id: 7,
            })
        };
        // Later phases refuse before the new CA exists.
        let err = rotating(Phase::TrustBoth)
            .ca("etcd", "etcd-ca")
            .expect_err("no new CA yet");
        assert!(err.to_string().contains("rotation"), "{err}");

        let new_phase = rotating(Phase::New).ca("etcd", "etcd-ca").expect("new");
        assert_eq!(new_phase.cert_pem(), old.cert_pem());
        assert_eq!(new_phase.trust_pem(), old.cert_pem());
        let files = Files::new(dir.path(), "etcd");
        let next = std::fs::read_to_string(&files.next_crt).expect("new CA written");
        assert!(std::fs::read_to_string(&files.next_key).is_ok());
        let (_, text) = openssl(&[
            "x509",
            "-noout",
            "-subject",
            "-in",
            files.next_crt.to_str().expect("utf-8"),
        ]);
        assert!(text.contains("etcd-ca-r7"), "{text}");
        let both = crate::rotation::bundle([old.cert_pem(), next.as_str()]);

        let trust = rotating(Phase::TrustBoth)
            .ca("etcd", "etcd-ca")
            .expect("trust");
        assert_eq!(
            trust.cert_pem(),
            old.cert_pem(),
            "still signs with the old CA"
        );
        assert_eq!(trust.trust_pem(), both);
        let kept = rotating(Phase::TrustBoth)
            .leaf(&trust, "m", &member_spec())
            .expect("kept");
        assert_eq!(kept, leaf, "trust-both re-issues nothing");

        let reissue = rotating(Phase::Reissue)
            .ca("etcd", "etcd-ca")
            .expect("reissue");
        assert_eq!(reissue.cert_pem(), next);
        assert_eq!(reissue.trust_pem(), both);
        let renewed = keys.leaf(&reissue, "m", &member_spec()).expect("renewed");
        assert_ne!(renewed, leaf, "reissue signs every leaf with the new CA");
        let again = keys.leaf(&reissue, "m", &member_spec()).expect("again");
        assert_eq!(again, renewed, "a second reissue changes nothing");
        let (ok, out) = openssl(&[
            "verify",
            "-CAfile",
            files.next_crt.to_str().expect("utf-8"),
            dir.path().join("m.crt").to_str().expect("utf-8"),
        ]);
        assert!(ok, "{out}");

        let drop = rotating(Phase::DropOld)
            .ca("etcd", "etcd-ca")
            .expect("drop");
        assert_eq!(drop.cert_pem(), next);
        assert_eq!(drop.trust_pem(), next, "the old CA is trusted no more");

        // Without an explicit phase, the state file decides (an install re-run mid-rotation).
        files
            .save(&State {
                finished: Phase::TrustBoth,
                id: 7,
            })
            .expect("save");
        assert_eq!(keys.ca("etcd", "etcd-ca").expect("state").trust_pem(), both);
        files
            .save(&State {
                finished: Phase::DropOld,
                id: 7,
            })
            .expect("save");
        files.finalize().expect("finalize");
        let after = keys.ca("etcd", "etcd-ca").expect("after");
        assert_eq!(after.cert_pem(), next);
        assert_eq!(after.trust_pem(), next);
        // Another CA of the directory is never affected.
        let other = rotating(Phase::Reissue)
            .ca("front-proxy", "fp")
            .expect("other");
        assert_eq!(other.trust_pem(), other.cert_pem());
    }

    #[test]
    fn a_kubeadm_rsa_ca_in_pkcs1_loads_and_signs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("front-proxy-ca.key");
        let crt = dir.path().join("front-proxy-ca.crt");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let (k, c) = (key.to_str().expect("utf-8"), crt.to_str().expect("utf-8"));
        run(&["genrsa", "-traditional", "-out", k, "2048"]);
        run(&[
            "req",
            "-x509",
            "-new",
            "-key",
            k,
            "-subj",
            "/CN=front-proxy-ca",
            "-days",
            "10",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out",
            c,
        ]);
        assert!(std::fs::read_to_string(&key)
            .expect("key")
            .starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        let ca = Ca::load_or_create(dir.path(), "front-proxy", "front-proxy-ca").expect("loads");
        let leaf = ca
            .issue(&CertSpec::new("front-proxy-client", Usage::Client))
            .expect("signs");
        let leaf_path = dir.path().join("leaf.crt");
        std::fs::write(&leaf_path, &leaf.cert_pem).expect("write");
        let (ok, out) = openssl(&["verify", "-CAfile", c, leaf_path.to_str().expect("utf-8")]);
        assert!(ok, "{out}");
        assert!(key_pair_from_pem(
            "-----BEGIN RSA PRIVATE KEY-----\n!!\n-----END RSA PRIVATE KEY-----"
        )
        .is_err());
    }

    #[test]
    fn half_a_ca_is_an_error_naming_the_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        Ca::load_or_create(dir.path(), "etcd", "etcd-ca").expect("ca");
        std::fs::remove_file(dir.path().join("etcd-ca.key")).expect("rm");
        let err = Ca::load_or_create(dir.path(), "etcd", "etcd-ca").expect_err("incomplete");
        let msg = err.to_string();
        assert!(
            msg.contains("etcd-ca.crt") && msg.contains("etcd-ca.key"),
            "{msg}"
        );

        std::fs::write(dir.path().join("etcd-ca.key"), "garbage").expect("write");
        let err = Ca::load_or_create(dir.path(), "etcd", "etcd-ca").expect_err("garbage");
        assert!(err.to_string().contains("etcd-ca.key"), "{err}");
    }
}
