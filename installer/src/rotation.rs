//! CA rotation (`kubexm-install rotate-ca`): the phases of the dual-CA transition and the
//! rotation's state, kept on the control host beside the CA it rotates.
//!
//! | phase finished | signs leaves | trusted (the CA file every node gets) |
//! |---|---|---|
//! | none | old | old |
//! | [`Phase::New`] | old | old (the new CA exists on the control host only) |
//! | [`Phase::TrustBoth`] | old | old + new |
//! | [`Phase::Reissue`] | new | old + new |
//! | [`Phase::DropOld`] | new | new (then the new CA replaces the old one, whose key is deleted) |
//!
//! Files in the CA's key directory (`WORK/pki/<cluster>/etcd/` for the etcd CA `etcd`):
//! `<name>-ca.crt`/`.key` (the CA in use), `<name>-next-ca.crt`/`.key` (the new one, from
//! `new` until `drop-old` finishes) and `<name>-ca.rotation` (JSON, [`State`]: the last phase
//! finished and the rotation's id). [`crate::pki::KeyDir::ca`] reads the state, so every
//! command run during a rotation (an install re-run, `certs renew`, `add-node`) signs and
//! distributes what the rotation's last finished phase says.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A rotation's state could not be read or written, or contradicts the files beside it.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// A file could not be read, written or removed.
    #[error("`{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The state file is not what KubeXM writes.
    #[error("`{}` is not a CA rotation state: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The state and the CA files disagree.
    #[error("the {name} CA rotation state is inconsistent: {message}")]
    Inconsistent {
        /// The CA (`etcd`).
        name: String,
        /// What disagrees, and what to do.
        message: String,
    },
}

/// A phase of the dual-CA transition, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// A new CA made on the control host beside the old one.
    New,
    /// Every place that trusts the CA trusts both (rolling restarts).
    TrustBoth,
    /// Every leaf re-issued from the new CA (rolling restarts).
    Reissue,
    /// The old CA removed from every trust bundle (rolling restarts), then its key deleted.
    DropOld,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 4] = [Phase::New, Phase::TrustBoth, Phase::Reissue, Phase::DropOld];

    /// The name on the command line and in the state file.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::New => "new",
            Phase::TrustBoth => "trust-both",
            Phase::Reissue => "reissue",
            Phase::DropOld => "drop-old",
        }
    }

    /// The phases still to run after `finished`, up to and including `upto`.
    pub fn todo(finished: Option<Phase>, upto: Phase) -> Vec<Phase> {
        Phase::ALL
            .into_iter()
            .filter(|p| finished.is_none_or(|f| *p > f) && *p <= upto)
            .collect()
    }

    /// Leaves are signed by the new CA once this phase finished.
    pub fn signs_with_new(self) -> bool {
        self >= Phase::Reissue
    }

    /// The old CA is still trusted once this phase finished.
    pub fn trusts_old(self) -> bool {
        self < Phase::DropOld
    }

    /// The new CA is trusted once this phase finished.
    pub fn trusts_new(self) -> bool {
        self >= Phase::TrustBoth
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rotation in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// The last phase that finished.
    pub finished: Phase,
    /// The rotation's id (when it started, Unix seconds): node-side markers carry it, so a
    /// `--resume` does not restart a member twice.
    pub id: i64,
}

/// The files of the CA `name` in `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// The CA in use.
    pub crt: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// The new CA.
    pub next_crt: PathBuf,
    /// Its key.
    pub next_key: PathBuf,
    /// The rotation's state.
    pub state: PathBuf,
}

/// The name of the new CA of `name` (as [`crate::pki::KeyDir::ca`] names CAs).
pub fn next_name(name: &str) -> String {
    format!("{name}-next")
}

impl Files {
    /// The files of the CA `name` in `dir`.
    pub fn new(dir: &Path, name: &str) -> Self {
        let next = next_name(name);
        Self {
            crt: dir.join(format!("{name}-ca.crt")),
            key: dir.join(format!("{name}-ca.key")),
            next_crt: dir.join(format!("{next}-ca.crt")),
            next_key: dir.join(format!("{next}-ca.key")),
            state: dir.join(format!("{name}-ca.rotation")),
        }
    }

    /// The state, `None` when no rotation is in progress.
    pub fn load(&self) -> Result<Option<State>, RotationError> {
        let text = match std::fs::read_to_string(&self.state) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(RotationError::Io {
                    path: self.state.clone(),
                    source,
                })
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| RotationError::Parse {
                path: self.state.clone(),
                message: e.to_string(),
            })
    }

    /// Records `state` (atomically, 0600 in the private key directory).
    pub fn save(&self, state: &State) -> Result<(), RotationError> {
        let text = serde_json::to_string(state).map_err(|e| RotationError::Parse {
            path: self.state.clone(),
            message: e.to_string(),
        })?;
        crate::private_dir::write_private_file(&self.state, format!("{text}\n").as_bytes(), 0o600)
            .map_err(|source| RotationError::Io {
                path: self.state.clone(),
                source,
            })
    }

    /// Refuses a state that contradicts the CA files: a new CA without a recorded rotation,
    /// a rotation whose new CA is gone (before `drop-old` finished), half a CA.
    pub fn check(&self, name: &str, state: Option<&State>) -> Result<(), RotationError> {
        let bad = |message: String| RotationError::Inconsistent {
            name: name.to_string(),
            message,
        };
        let next = (self.next_crt.exists(), self.next_key.exists());
        match (state, next) {
            (None, (false, false)) => Ok(()),
            (None, _) => Err(bad(format!(
                "`{}` exists but no rotation is recorded in `{}`: remove the new CA's files to start again (nothing on the nodes trusts it before trust-both)",
                self.next_crt.display(),
                self.state.display()
            ))),
            (Some(s), (true, true)) => {
                if self.crt.exists() && self.key.exists() {
                    Ok(())
                } else {
                    Err(bad(format!(
                        "`{}` records phase {} but the CA in use (`{}`) is incomplete: restore it from a backup",
                        self.state.display(),
                        s.finished,
                        self.crt.display()
                    )))
                }
            }
            (Some(s), _) if s.finished == Phase::DropOld => Ok(()),
            (Some(s), _) => Err(bad(format!(
                "`{}` records phase {} but the new CA (`{}` and its key) is missing: restore it from a backup (the nodes may already trust or use it)",
                self.state.display(),
                s.finished,
                self.next_crt.display()
            ))),
        }
    }

    /// After `drop-old`: the new CA becomes the CA in use (the old key and certificate are
    /// replaced, so deleted), the new CA's files and the state are removed. Idempotent.
    pub fn finalize(&self) -> Result<(), RotationError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| RotationError::Io { path, source }
        };
        if self.next_crt.exists() && self.next_key.exists() {
            let key = std::fs::read(&self.next_key).map_err(io(&self.next_key))?;
            let crt = std::fs::read(&self.next_crt).map_err(io(&self.next_crt))?;
            crate::private_dir::write_private_file(&self.key, &key, 0o600)
                .map_err(io(&self.key))?;
            crate::private_dir::write_private_file(&self.crt, &crt, 0o644)
                .map_err(io(&self.crt))?;
        }
        for f in [&self.next_key, &self.next_crt, &self.state] {
            match std::fs::remove_file(f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(io(f)(source)),
            }
        }
        Ok(())
    }
}

/// The trust bundle of `certs` (PEM texts): each distinct certificate once, in order.
pub fn bundle<'a>(certs: impl IntoIterator<Item = &'a str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for c in certs {
        let c = c.trim_end();
        if !c.is_empty() && !seen.contains(&c) {
            seen.push(c);
        }
    }
    seen.iter().map(|c| format!("{c}\n")).collect()
}

/// The certificates of a PEM text, in order (each from its `BEGIN` to its `END` line).
pub fn certificates(pem: &str) -> Vec<&str> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        out.push(&rest[start..start + len + END.len()]);
        rest = &rest[start + len + END.len()..];
    }
    out
}

/// A CA file that is also a trust bundle (kubeadm's `front-proxy-ca.crt`): the signing CA
/// `first`, then every other certificate of `trust`, each once.
pub fn signing_first(first: &str, trust: &str) -> String {
    bundle(std::iter::once(first).chain(certificates(trust)))
}

/// The common name of a new CA replacing one named `common_name`: a suffix with the rotation's
/// time, so that `certs check` tells the issuers apart.
pub fn next_common_name(common_name: &str, id: i64) -> String {
    let base = common_name
        .rsplit_once("-r")
        .filter(|(_, t)| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .map_or(common_name, |(b, _)| b);
    format!("{base}-r{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signing_ca_file_starts_with_the_signer_and_holds_each_certificate_once() {
        let a = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----";
        let b = "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----";
        let trust = bundle([a, b]);
        assert_eq!(certificates(&trust), [a, b]);
        assert_eq!(signing_first(b, &trust), format!("{b}\n{a}\n"));
        assert_eq!(signing_first(a, &trust), trust);
        assert_eq!(signing_first(b, b), format!("{b}\n"));
        assert!(certificates("garbage -----BEGIN CERTIFICATE----- no end").is_empty());
    }

    #[test]
    fn phases_run_in_order_from_the_last_finished_up_to_the_target() {
        assert_eq!(Phase::todo(None, Phase::DropOld), Phase::ALL.to_vec());
        assert_eq!(
            Phase::todo(None, Phase::TrustBoth),
            [Phase::New, Phase::TrustBoth]
        );
        assert_eq!(
            Phase::todo(Some(Phase::TrustBoth), Phase::DropOld),
            [Phase::Reissue, Phase::DropOld]
        );
        assert!(Phase::todo(Some(Phase::Reissue), Phase::TrustBoth).is_empty());
        assert!(Phase::todo(Some(Phase::DropOld), Phase::DropOld).is_empty());
    }

    #[test]
    fn what_each_phase_signs_and_trusts() {
        let table: Vec<(Phase, bool, bool, bool)> = Phase::ALL
            .iter()
            .map(|p| (*p, p.signs_with_new(), p.trusts_old(), p.trusts_new()))
            .collect();
        assert_eq!(
            table,
            [
                (Phase::New, false, true, false),
                (Phase::TrustBoth, false, true, true),
                (Phase::Reissue, true, true, true),
                (Phase::DropOld, true, false, true),
            ]
        );
        // Never a phase where the signing CA is not trusted.
        for (p, new, old, trusts_new) in table {
            assert!(if new { trusts_new } else { old }, "{p}");
        }
    }

    #[test]
    fn a_bundle_holds_each_certificate_once() {
        let a = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let b = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----";
        assert_eq!(bundle([a, b]), format!("{a}{b}\n"));
        assert_eq!(bundle([a, a]), a);
        assert_eq!(bundle([a, "", a, b, b]), format!("{a}{b}\n"));
    }

    #[test]
    fn the_new_common_name_replaces_an_earlier_suffix() {
        assert_eq!(next_common_name("etcd-ca", 100), "etcd-ca-r100");
        assert_eq!(next_common_name("etcd-ca-r100", 200), "etcd-ca-r200");
        assert_eq!(next_common_name("my-root", 5), "my-root-r5");
    }

    #[test]
    fn the_state_round_trips_and_unknown_fields_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = Files::new(dir.path(), "etcd");
        assert_eq!(f.load().expect("none"), None);
        let s = State {
            finished: Phase::TrustBoth,
            id: 42,
        };
        f.save(&s).expect("save");
        assert_eq!(
            std::fs::read_to_string(&f.state).expect("read"),
            "{\"finished\":\"trust-both\",\"id\":42}\n"
        );
        assert_eq!(f.load().expect("load"), Some(s));
        std::fs::write(&f.state, "{\"finished\":\"new\",\"id\":1,\"x\":2}").expect("write");
        let err = f.load().expect_err("unknown field");
        assert!(err.to_string().contains("etcd-ca.rotation"), "{err}");
    }

    #[test]
    fn inconsistent_states_are_refused_and_finalize_replaces_the_old_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = Files::new(dir.path(), "etcd");
        for (p, text) in [
            (&f.crt, "old"),
            (&f.key, "oldkey"),
            (&f.next_crt, "new"),
            (&f.next_key, "newkey"),
        ] {
            std::fs::write(p, text).expect("write");
        }
        let err = f.check("etcd", None).expect_err("new CA without state");
        assert!(err.to_string().contains("no rotation is recorded"), "{err}");
        let s = State {
            finished: Phase::Reissue,
            id: 1,
        };
        f.check("etcd", Some(&s)).expect("consistent");
        std::fs::remove_file(&f.next_key).expect("rm");
        let err = f.check("etcd", Some(&s)).expect_err("new key gone");
        assert!(err.to_string().contains("is missing"), "{err}");
        std::fs::write(&f.next_key, "newkey").expect("write");

        f.save(&State {
            finished: Phase::DropOld,
            id: 1,
        })
        .expect("save");
        f.finalize().expect("finalize");
        assert_eq!(std::fs::read_to_string(&f.crt).expect("crt"), "new");
        assert_eq!(std::fs::read_to_string(&f.key).expect("key"), "newkey");
        for gone in [&f.next_crt, &f.next_key, &f.state] {
            assert!(!gone.exists(), "{}", gone.display());
        }
        f.finalize().expect("twice");
        f.check("etcd", None).expect("nothing in progress");
    }
}
