//! Harbor project creation through its v2.0 API (`GET/POST /api/v2.0/projects`).

use base64::Engine;
use reqwest::StatusCode;

use super::{RegistryTarget, SeedError};

/// Creates every project in `projects` that Harbor does not have yet; returns those created.
pub async fn ensure_projects(
    http: &reqwest::Client,
    base: &str,
    target: &RegistryTarget,
    projects: &[String],
    public: bool,
) -> Result<Vec<String>, SeedError> {
    let auth = match (&target.username, &target.password) {
        (Some(u), Some(p)) => Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{}", p.expose()))
        )),
        _ => None,
    };
    let err = |detail: String| SeedError::Harbor {
        registry: target.host.clone(),
        detail,
    };
    let mut created = Vec::new();
    for project in projects {
        let mut req = http
            .get(format!("{base}/api/v2.0/projects"))
            .query(&[("name", project.as_str())]);
        if let Some(a) = &auth {
            req = req.header(reqwest::header::AUTHORIZATION, a);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| err(format!("GET /api/v2.0/projects?name={project}: {e}")))?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(err(format!(
                "GET /api/v2.0/projects?name={project} answered {status}: {}",
                harbor_message(&body)
            )));
        }
        let list: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| err(format!("project list is not JSON: {e}")))?;
        let exists = list.as_array().is_some_and(|a| {
            a.iter()
                .any(|p| p.get("name").and_then(|n| n.as_str()) == Some(project))
        });
        if exists {
            continue;
        }
        let payload = serde_json::json!({
            "project_name": project,
            "metadata": { "public": if public { "true" } else { "false" } },
        });
        let mut req = http
            .post(format!("{base}/api/v2.0/projects"))
            .json(&payload);
        if let Some(a) = &auth {
            req = req.header(reqwest::header::AUTHORIZATION, a);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| err(format!("POST /api/v2.0/projects: {e}")))?;
        match resp.status() {
            StatusCode::CREATED => created.push(project.clone()),
            StatusCode::CONFLICT => {}
            s => {
                let body = resp.text().await.unwrap_or_default();
                let hint = if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN {
                    "; the user needs the right to create projects (e.g. the Harbor admin)"
                } else {
                    ""
                };
                return Err(err(format!(
                    "creating project `{project}` answered {s}: {}{hint}",
                    harbor_message(&body)
                )));
            }
        }
    }
    Ok(created)
}

/// Harbor's `{"errors":[{"code":…,"message":…}]}` as `code: message`, else the raw body.
fn harbor_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let msgs: Vec<String> = parsed
        .as_ref()
        .and_then(|v| v.get("errors"))
        .and_then(|e| e.as_array())
        .map(|a| {
            a.iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.get("code").and_then(|c| c.as_str()).unwrap_or("?"),
                        e.get("message").and_then(|c| c.as_str()).unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if msgs.is_empty() {
        body.chars().take(300).collect()
    } else {
        msgs.join("; ")
    }
}
