//! The probe to `--peer`: an RC send/receive over the side channel's connection, through
//! the probe-verbs plugin.

use std::sync::Arc;

use rocewatch_runtime::app::App;

use crate::check::{check, Check, Status};

pub(crate) async fn probe_check(agent: &Arc<App>, peer: &str) -> Check {
    let Some(entry) = agent.probe_plugin() else {
        return check(
            "probe",
            peer,
            Status::Skip,
            "the probe-verbs plugin is not loaded (rocewatch plugins says why)",
            None,
        );
    };
    let target = rocewatch_plugin_api::ProbeTarget::new(peer, 64, 2000);
    match rocewatch_probes::probe_once(&entry, target, agent.metrics()).await {
        Ok(r) => match r.outcome {
            rocewatch_plugin_api::ProbeOutcome::Ok { rtt_seconds } => check(
                "probe",
                peer,
                Status::Pass,
                format!("RC send/receive answered in {:.1} us", rtt_seconds * 1e6),
                None,
            ),
            rocewatch_plugin_api::ProbeOutcome::Timeout => check(
                "probe",
                peer,
                Status::Fail,
                "connected, but no answer within 2 s",
                Some("RoCE packets are lost on the path: check the firewall on both hosts (UDP 4791), PFC/ECN, and the switch".into()),
            ),
            rocewatch_plugin_api::ProbeOutcome::ConnectFailed { cause } => check(
                "probe",
                peer,
                Status::Fail,
                format!("no connection: {cause}"),
                Some(format!("the peer must run `rocewatch probe --serve` (or the agent with [probes]); check that {peer} is reachable over the RDMA netdev and UDP 4791 is not dropped")),
            ),
        },
        Err(e) => check("probe", peer, Status::Fail, e.to_string(), None),
    }
}
