//! A NIC's interrupts in procfs: the lines of `/proc/interrupts` that belong to a netdev.

/// The interrupts of `/proc/interrupts` that belong to a netdev: named after it
/// (`ens1f0np0-TxRx-3`, `eth0-rx-0`) or after its PCI function
/// (`mlx5_comp3@pci:0000:3b:00.0`).
pub fn nic_irqs(table: &str, netdev: &str, pci: Option<&str>) -> Vec<String> {
    table
        .lines()
        .filter(|l| {
            l.split_whitespace().last().is_some_and(|n| {
                n == netdev
                    || n.starts_with(&format!("{netdev}-"))
                    || pci.is_some_and(|p| n.ends_with(&format!("@pci:{p}")) || n.contains(p))
            })
        })
        .filter_map(|l| {
            let irq = l.split(':').next()?.trim();
            irq.parse::<u32>().ok().map(|_| irq.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_are_matched_by_netdev_name_or_pci_function() {
        let table = "            CPU0       CPU1
  24:          0        120  PCI-MSIX-0000:3b:00.0   1-edge      mlx5_comp0@pci:0000:3b:00.0
  25:        300          0  PCI-MSIX-0000:3b:00.0   2-edge      mlx5_comp1@pci:0000:3b:00.0
  26:          5          0  PCI-MSIX-0000:3b:00.1   1-edge      mlx5_comp0@pci:0000:3b:00.1
  40:          1          1  PCI-MSIX-0000:5e:00.0   3-edge      ens5f0-TxRx-0
  41:          1          1  PCI-MSIX-0000:5e:00.0   4-edge      ens5f01-TxRx-0
 NMI:          0          0   Non-maskable interrupts
";
        assert_eq!(
            nic_irqs(table, "ens1f0np0", Some("0000:3b:00.0")),
            ["24", "25"]
        );
        assert_eq!(nic_irqs(table, "ens5f0", None), ["40"]);
        assert!(nic_irqs(table, "eth9", None).is_empty());
    }
}
