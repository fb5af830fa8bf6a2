//! The control channel between two partners of a round: how the driving host learns the
//! serving host's rail addresses and how the two keep their tests apart, with no
//! coordinator.
//!
//! Every host listens on one TCP port for the whole sweep. For each of its driving steps
//! a host connects to its partner's port and sends [`Message::Hello`] naming the step
//! (its name, the round, the phase). The partner answers [`Message::Rails`] (its NICs in
//! rank order, each with the address its RoCE v2 GID carries) only when it has itself
//! reached that step as the serving side: a host still busy with an earlier round keeps
//! its next driver waiting instead of being measured twice at once. The driver runs its
//! tests, then sends [`Message::Done`], which ends the partner's step. A hello the
//! schedule does not explain (a host not in the list, a round where the two are not
//! partners, the wrong side driving) is answered [`Message::Refused`] with why.
//!
//! One JSON object per line, at most [`MAX_LINE`] bytes; anything else is refused with
//! what was wrong. The messages carry only host names, NIC names and addresses: a stray
//! client learns what `rocewatch env` would show, and can at worst end a step early.

use serde::{Deserialize, Serialize};

use crate::rails::HostRails;
use crate::schedule::{Phase, Role, Schedule};

/// The longest line either side reads (a host of 64 rails fits many times over).
pub const MAX_LINE: usize = 64 * 1024;

/// The step a message is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepId {
    /// The driving host, as the host list spells it.
    pub from: String,
    pub round: usize,
    pub phase: Phase,
}

/// One line of the control channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Driver → server: this step is about to run.
    Hello(StepId),
    /// Server → driver: go ahead, here are my rails.
    Rails(HostRails),
    /// Server → driver: the schedule does not explain this hello.
    Refused(String),
    /// Driver → server: this step's tests are over.
    Done(StepId),
}

/// Why a line is no message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("a control line of {0} bytes (at most {MAX_LINE})")]
    TooLong(usize),
    #[error("a control line that is not a message: {0}")]
    NotAMessage(String),
}

impl Message {
    /// The message as one line, newline included.
    pub fn encode(&self) -> String {
        let mut s = serde_json::to_string(self).expect("messages serialize");
        s.push('\n');
        s
    }

    /// One line (its newline optional) as a message.
    pub fn decode(line: &str) -> Result<Message, ControlError> {
        if line.len() > MAX_LINE {
            return Err(ControlError::TooLong(line.len()));
        }
        serde_json::from_str(line.trim_end_matches(['\n', '\r']))
            .map_err(|e| ControlError::NotAMessage(e.to_string()))
    }
}

/// Whether `me` (an index into the schedule) should answer `hello`: its sender must be a
/// host of the list that drives `me` in that round and phase. Errors say why not.
pub fn admit(schedule: &Schedule, me: usize, hello: &StepId) -> Result<(), String> {
    let from = schedule
        .index(&hello.from)
        .map_err(|_| format!("{:?} is not a host of this sweep", hello.from))?;
    if hello.round >= schedule.rounds() {
        return Err(format!(
            "round {} is past the sweep's {} rounds",
            hello.round,
            schedule.rounds()
        ));
    }
    if schedule.partner(me, hello.round) != Some(from) {
        return Err(format!(
            "{} is not {}'s partner in round {}",
            hello.from,
            schedule.hosts()[me],
            hello.round
        ));
    }
    if schedule.role(from, hello.round, hello.phase) != Some(Role::Drive) {
        return Err(format!(
            "{} does not drive in round {} {:?}",
            hello.from, hello.round, hello.phase
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rails::Nic;
    use crate::schedule::Mode;
    use proptest::prelude::*;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node{i:02}")).collect()
    }

    #[test]
    fn messages_round_trip_as_one_line_each() {
        let msgs = [
            Message::Hello(StepId {
                from: "node01".into(),
                round: 2,
                phase: Phase::Reverse,
            }),
            Message::Rails(HostRails {
                host: "node02".into(),
                nics: vec![Nic {
                    name: "mlx5_0:1".into(),
                    netdev: Some("ens1np0".into()),
                    up: true,
                    line_rate_gbps: Some(400.0),
                    addr: Some("10.0.0.2".into()),
                }],
            }),
            Message::Refused("no".into()),
        ];
        for m in msgs {
            let line = m.encode();
            assert_eq!(line.matches('\n').count(), 1, "{line}");
            assert_eq!(Message::decode(&line).unwrap(), m);
        }
        assert_eq!(
            Message::encode(&Message::Done(StepId {
                from: "a".into(),
                round: 0,
                phase: Phase::Forward
            })),
            "{\"done\":{\"from\":\"a\",\"round\":0,\"phase\":\"forward\"}}\n"
        );
    }

    #[test]
    fn faults_are_named() {
        let e = Message::decode(&"x".repeat(MAX_LINE + 1)).unwrap_err();
        assert_eq!(e, ControlError::TooLong(MAX_LINE + 1));
        let e = Message::decode("{\"hello\":{\"from\":\"a\",\"round\":0}}").unwrap_err();
        assert!(e.to_string().contains("missing field `phase`"), "{e}");
        let e = Message::decode("{\"bye\":1}").unwrap_err();
        assert!(e.to_string().contains("unknown variant `bye`"), "{e}");
    }

    #[test]
    fn only_the_scheduled_driver_is_admitted() {
        let s = Schedule::new(hosts(4), Mode::Default).unwrap();
        for round in 0..s.rounds() {
            for me in 0..4 {
                let Some(p) = s.partner(me, round) else {
                    continue;
                };
                for phase in Phase::BOTH {
                    let hello = StepId {
                        from: s.hosts()[p].clone(),
                        round,
                        phase,
                    };
                    let ok = admit(&s, me, &hello);
                    let drives = s.role(p, round, phase) == Some(Role::Drive);
                    assert_eq!(
                        ok.is_ok(),
                        drives,
                        "round {round} {phase:?} {me}<-{p}: {ok:?}"
                    );
                }
                let other = (0..4).find(|&o| o != me && o != p).unwrap();
                let e = admit(
                    &s,
                    me,
                    &StepId {
                        from: s.hosts()[other].clone(),
                        round,
                        phase: Phase::Forward,
                    },
                )
                .unwrap_err();
                assert!(e.contains("is not"), "{e}");
            }
        }
        let e = admit(
            &s,
            0,
            &StepId {
                from: "intruder".into(),
                round: 0,
                phase: Phase::Forward,
            },
        )
        .unwrap_err();
        assert_eq!(e, "\"intruder\" is not a host of this sweep");
        let e = admit(
            &s,
            0,
            &StepId {
                from: "node01".into(),
                round: 99,
                phase: Phase::Forward,
            },
        )
        .unwrap_err();
        assert!(e.starts_with("round 99 is past"), "{e}");
    }

    proptest! {
        /// Any line: a message or an error, never a panic.
        #[test]
        fn any_line_is_decoded_or_refused(line in "\\PC{0,200}") {
            let _ = Message::decode(&line);
        }

        /// Any hello against any schedule: admitted or refused, never a panic.
        #[test]
        fn any_hello_is_judged(n in 2usize..40, me in 0usize..40, from in "node[0-9]{2}", round in 0usize..8, fwd: bool) {
            let s = Schedule::new(hosts(n), Mode::Default).unwrap();
            let phase = if fwd { Phase::Forward } else { Phase::Reverse };
            let _ = admit(&s, me % n, &StepId { from, round, phase });
        }
    }
}
