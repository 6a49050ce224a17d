//! Push the bundle's images into a registry, from the control host (the seed library).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use kubexm_bundles::manifest::BundleManifest;

use super::generic::{GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::runner::Runner;
use crate::seed::SeedOptions;

/// Seeds every image of an unpacked bundle into a registry. Runs on the control host (the
/// runner is not used); what the registry already has is skipped by the seed itself.
#[derive(Debug, Clone)]
pub struct SeedImages {
    /// The unpacked bundle directory (`None` when planning without a bundle).
    pub dir: Option<PathBuf>,
    /// Its manifest.
    pub manifest: Option<Arc<BundleManifest>>,
    /// Number of images (for the plan).
    pub images: usize,
    /// Target and rewrite rules.
    pub options: SeedOptions,
}

#[async_trait]
impl GenericStep for SeedImages {
    fn plan(&self) -> OpPlan {
        let o = &self.options;
        OpPlan {
            kind: "seed",
            detail: format!(
                "{} image(s) from the bundle -> {}{} ({:?}{}{})",
                self.images,
                if o.target.plain_http {
                    "http://"
                } else {
                    "https://"
                },
                o.target.host,
                o.rewrite,
                o.project
                    .as_deref()
                    .map(|p| format!(", project {p}"))
                    .unwrap_or_default(),
                o.harbor
                    .map(|public| harbor_plan(public, &o.harbor_projects))
                    .unwrap_or_default()
            ),
            input: self.manifest.as_ref().map(|m| {
                format!(
                    "images: {}",
                    m.images
                        .iter()
                        .map(|i| i.digest.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }),
        }
    }

    async fn is_done(&self, _runner: &dyn Runner) -> Result<bool, StepError> {
        Ok(false)
    }

    async fn apply(&self, _runner: &dyn Runner) -> Result<(), StepError> {
        self.apply_noted(_runner).await.map(drop)
    }

    async fn apply_noted(
        &self,
        _runner: &dyn Runner,
    ) -> Result<super::generic::Applied, StepError> {
        let (Some(dir), Some(manifest)) = (&self.dir, &self.manifest) else {
            return Err(StepError::Invalid(
                "seeding needs the unpacked bundle (run with --bundle)".to_string(),
            ));
        };
        // The seed future is not `Send` (its upload closures borrow across awaits), so it runs
        // on its own single-threaded runtime on a blocking thread.
        let (dir, manifest, options) = (dir.clone(), manifest.clone(), self.options.clone());
        let report = tokio::task::spawn_blocking(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| StepError::Seed(format!("cannot start a runtime: {e}")))?;
            rt.block_on(crate::seed::seed(&dir, &manifest, &options))
                .map_err(|e| StepError::Seed(e.to_string()))
        })
        .await
        .map_err(|e| StepError::Seed(format!("the seeding thread failed: {e}")))??;
        let changed = report.images_complete < report.images;
        Ok(super::generic::Applied {
            notes: if changed {
                vec![format!(
                    "seeded {} image(s) into {}: {} already complete, {} blob(s) uploaded, {} mounted, {} present",
                    report.images,
                    self.options.target.host,
                    report.images_complete,
                    report.blobs_uploaded,
                    report.blobs_mounted,
                    report.blobs_present
                )]
            } else {
                Vec::new()
            },
            changed,
        })
    }

    async fn verify(&self, _runner: &dyn Runner) -> Result<(), StepError> {
        Ok(())
    }

    fn revert(&self) -> Option<String> {
        None
    }
}

/// `, Harbor projects created first: …` for the plan.
fn harbor_plan(public: bool, listed: &[(String, bool)]) -> String {
    let vis = |p: bool| if p { "public" } else { "private" };
    let mut s = format!(
        ", Harbor: missing projects created first ({} unless listed",
        vis(public)
    );
    for (i, (name, p)) in listed.iter().enumerate() {
        s.push_str(if i == 0 { ": " } else { ", " });
        s.push_str(&format!("{name} {}", vis(*p)));
    }
    s.push(')');
    s
}
