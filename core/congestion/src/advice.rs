//! What the port is configured to do, next to the advice: the settings the knob of a
//! state points at (PFC and ECN on the priority, the DCQCN parameters, the priority's
//! buffer, storm prevention), read from the configuration plugins (`qos show`'s names),
//! each with what moving it does. Changes nothing: `qos plan/apply` does.

use crate::{Rates, State, Verdict};

/// Whether the "3,4" / "none" list holds `prio`.
fn holds(list: &str, prio: u8) -> bool {
    list.split(',').any(|p| p.trim() == prio.to_string())
}

/// The lines of configuration advice for a verdict on priority `prio`; `get` gives a
/// setting's value (`None`: not read, not there). Empty when the state needs nothing or
/// nothing it points at was read.
pub fn settings_advice(
    v: &Verdict,
    r: &Rates,
    prio: u8,
    get: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let ecn_marks = [r.ecn_marked, r.cnp_sent, r.cnp_handled]
        .iter()
        .flatten()
        .any(|x| x.is_finite() && *x > 0.0);
    match v.state {
        State::PfcDominated if !ecn_marks => {
            for (k, side) in [
                ("ecn_np_enabled", "notification point (receiver)"),
                ("ecn_rp_enabled", "reaction point (sender)"),
            ] {
                if let Some(list) = get(k) {
                    if !holds(&list, prio) {
                        out.push(format!(
                            "ECN {side} is off on priority {prio} here ({k} = {list}): add {prio} ([[qos.desired]] {k})"
                        ));
                    }
                }
            }
        }
        State::PfcDominated => {
            // Marks come, but pauses win: the senders cut their rate too late or too
            // little. Each parameter with what lowering or raising it does.
            for (k, unit, what) in [
                (
                    "dcqcn_min_time_between_cnps",
                    "µs",
                    "the receiver's gap between CNPs per QP: lower sends them sooner",
                ),
                (
                    "dcqcn_rate_reduce_monitor_period",
                    "µs",
                    "the senders cut their rate at most once per period: lower cuts sooner",
                ),
                (
                    "dcqcn_rpg_min_dec_fac",
                    "%",
                    "the smallest factor a CNP multiplies the rate by: lower allows deeper cuts",
                ),
                (
                    "dcqcn_rate_to_set_on_first_cnp",
                    "Mb/s",
                    "the rate a flow drops to on its first CNP (0: none): a value cuts new incast flows at once",
                ),
            ] {
                if let Some(val) = get(k) {
                    out.push(format!("NIC: {k} = {val} {unit} ({what})"));
                }
            }
        }
        State::Lossy => {
            if let Some(list) = get("pfc_enabled") {
                if !holds(&list, prio) {
                    out.push(format!(
                        "PFC is off on priority {prio} here (pfc_enabled = {list}): add {prio} ([[qos.desired]] pfc_enabled; mlx5 takes the link down and up to change it)"
                    ));
                } else if r.discards.is_some_and(|d| d > 0.0) {
                    // Lossless here and still discarding: the buffer overflowed before
                    // the pause took effect.
                    if let (Some(map), Some(sizes)) = (get("prio2buffer"), get("buffer_size")) {
                        let b: Option<usize> = map
                            .split(',')
                            .nth(prio as usize)
                            .and_then(|x| x.trim().parse().ok());
                        let size = b.and_then(|b| sizes.split(',').nth(b).map(str::trim));
                        if let (Some(b), Some(size)) = (b, size) {
                            out.push(format!(
                                "PFC is on, yet priority {prio} discards: its buffer {b} holds {size} bytes; `rocewatch doctor` (buffers) compares it with the headroom the speed and cable need{}",
                                get("cable_length").map_or(String::new(), |c| format!(" (cable_length = {c} m)"))
                            ));
                        }
                    }
                }
            }
        }
        State::Storm => {
            if let Some(t) = get("pfc_prevention_timeout") {
                out.push(format!(
                    "this NIC's storm prevention: pfc_prevention_timeout = {t} (ms, auto or off; [[qos.desired]] pfc_prevention_timeout)"
                ));
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify;
    use std::collections::BTreeMap;

    fn getter<'a>(m: &'a BTreeMap<&str, &str>) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| m.get(k).map(|v| v.to_string())
    }

    #[test]
    fn pauses_without_marks_point_at_the_ecn_enables() {
        let r = Rates {
            pause_frames_rx: Some(5000.0),
            paused_by_peer: Some(0.2),
            tx_bytes: Some(1e9),
            ecn_marked: Some(0.0),
            cnp_sent: Some(0.0),
            cnp_handled: Some(0.0),
            ..Default::default()
        };
        let v = classify(&r);
        assert_eq!(v.state, State::PfcDominated);
        let m = BTreeMap::from([("ecn_np_enabled", "none"), ("ecn_rp_enabled", "3")]);
        let a = settings_advice(&v, &r, 3, &getter(&m));
        assert_eq!(a.len(), 1, "{a:?}");
        assert!(
            a[0].contains(
                "notification point (receiver) is off on priority 3 here (ecn_np_enabled = none)"
            ),
            "{a:?}"
        );
    }

    #[test]
    fn late_marks_point_at_the_dcqcn_timers_with_their_values() {
        let r = Rates {
            pause_frames_rx: Some(5000.0),
            paused_by_peer: Some(0.2),
            tx_bytes: Some(1e9),
            ecn_marked: Some(100.0),
            cnp_sent: Some(100.0),
            ..Default::default()
        };
        let v = classify(&r);
        assert_eq!(v.state, State::PfcDominated);
        let m = BTreeMap::from([
            ("dcqcn_min_time_between_cnps", "4"),
            ("dcqcn_rate_reduce_monitor_period", "4"),
        ]);
        let a = settings_advice(&v, &r, 3, &getter(&m));
        assert_eq!(
            a,
            [
                "NIC: dcqcn_min_time_between_cnps = 4 µs (the receiver's gap between CNPs per QP: lower sends them sooner)",
                "NIC: dcqcn_rate_reduce_monitor_period = 4 µs (the senders cut their rate at most once per period: lower cuts sooner)"
            ]
        );
        // Nothing read: nothing said.
        assert!(settings_advice(&v, &r, 3, &|_| None).is_empty());
    }

    #[test]
    fn losses_point_at_pfc_then_at_the_buffer() {
        let r = Rates {
            discards: Some(50.0),
            tx_bytes: Some(1e9),
            ..Default::default()
        };
        let v = classify(&r);
        assert_eq!(v.state, State::Lossy);
        let off = BTreeMap::from([("pfc_enabled", "none")]);
        let a = settings_advice(&v, &r, 3, &getter(&off));
        assert!(
            a[0].contains("PFC is off on priority 3 here (pfc_enabled = none)"),
            "{a:?}"
        );
        let on = BTreeMap::from([
            ("pfc_enabled", "3"),
            ("prio2buffer", "0,0,0,1,0,0,0,0"),
            ("buffer_size", "130944,40000,0,0,0,0,0,0"),
            ("cable_length", "30"),
        ]);
        let a = settings_advice(&v, &r, 3, &getter(&on));
        assert!(
            a[0].contains("its buffer 1 holds 40000 bytes") && a[0].contains("cable_length = 30 m"),
            "{a:?}"
        );
    }

    #[test]
    fn healthy_states_get_no_advice() {
        let r = Rates {
            tx_bytes: Some(1e9),
            ..Default::default()
        };
        let v = classify(&r);
        let m = BTreeMap::from([("pfc_enabled", "none")]);
        assert!(settings_advice(&v, &r, 3, &getter(&m)).is_empty());
    }
}
