//! Each error says its own part once (issue 35): an error's message never repeats its cause's
//! text, because the cause is printed after it (`main.rs` prints the chain, and
//! `error_chain::chain` joins it where one line is kept, e.g. in the run journal).

use std::error::Error;
use std::io;
use std::path::PathBuf;

use kubexm_install::backup::{BackupError, CryptError};
use kubexm_install::error_chain::chain;
use kubexm_install::inventory::InventoryError;
use kubexm_install::pipeline::executor::PipelineError;
use kubexm_install::pipeline::state::StateError;
use kubexm_install::pipeline::StepError;
use kubexm_install::pki::PkiError;
use kubexm_install::run::InstallError;
use kubexm_install::runner::fetch::FetchError;
use kubexm_install::runner::RunError;

/// A cause whose text cannot occur by accident in a message.
fn cause() -> io::Error {
    io::Error::other("disk on fire #4711")
}

/// Every level of the chain: its message does not contain the text of its cause.
fn assert_each_part_once(e: &(dyn Error + 'static)) {
    let mut cur: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(s) = c.source() {
            let (mine, theirs) = (c.to_string(), s.to_string());
            assert!(
                !mine.contains(&theirs),
                "`{mine}` repeats its cause `{theirs}` (whole chain: {})",
                chain(e)
            );
        }
        cur = c.source();
    }
    let line = chain(e);
    assert_eq!(
        line.matches("disk on fire #4711").count(),
        1,
        "the cause is said exactly once in `{line}`"
    );
}

#[test]
fn no_error_prints_its_cause_twice() {
    let samples: Vec<Box<dyn Error + 'static>> = vec![
        Box::new(PkiError::Io {
            path: PathBuf::from("/work/pki/ca.crt"),
            source: cause(),
        }),
        Box::new(StateError::Io {
            path: PathBuf::from("/work/state.json"),
            source: cause(),
        }),
        Box::new(RunError::Io {
            node: "node1".into(),
            context: "reading the upload".into(),
            source: cause(),
        }),
        Box::new(InventoryError::PasswordFile {
            host: "node1".into(),
            path: PathBuf::from("/etc/kubexm/pw"),
            source: cause(),
        }),
        Box::new(InstallError::Journal {
            path: PathBuf::from("/work"),
            source: cause(),
        }),
        Box::new(FetchError::Local {
            path: "/work/fetched".into(),
            source: cause(),
        }),
        Box::new(BackupError::Io {
            context: "writing the archive".into(),
            source: cause(),
        }),
        Box::new(CryptError::Io {
            context: "reading the key".into(),
            source: cause(),
        }),
        Box::new(PipelineError::Build {
            module: "etcd".into(),
            source: StepError::Pki {
                what: "etcd certificates",
                source: PkiError::Io {
                    path: PathBuf::from("/work/pki/etcd/ca.key"),
                    source: cause(),
                },
            },
        }),
        Box::new(StepError::Run(RunError::Io {
            node: "node2".into(),
            context: "spawning ssh".into(),
            source: cause(),
        })),
    ];
    for e in &samples {
        assert_each_part_once(e.as_ref());
    }
}

#[test]
fn a_step_keeps_the_pki_cause_typed_and_says_each_part_once() {
    let e = StepError::Pki {
        what: "Kubernetes certificates",
        source: PkiError::Io {
            path: PathBuf::from("/work/pki/ca.key"),
            source: cause(),
        },
    };
    assert!(matches!(
        e.source().and_then(|s| s.downcast_ref::<PkiError>()),
        Some(PkiError::Io { .. })
    ));
    assert_eq!(
        chain(&e),
        "Kubernetes certificates: /work/pki/ca.key: disk on fire #4711"
    );
    assert!(!e.is_retryable(), "bad key material is not transient");
}
