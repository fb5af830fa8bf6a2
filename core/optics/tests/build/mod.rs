//! Module memories built field by field (offsets from SFF-8472, SFF-8636 and CMIS as
//! ethtool's `sfpdiag.c`, `qsfp.h` and `cmis.h` name them), with their checksums right
//! unless a test breaks one.
#![allow(dead_code)]

pub fn put_ascii(bytes: &mut [u8], offset: usize, len: usize, text: &str) {
    let field = &mut bytes[offset..offset + len];
    field.fill(b' ');
    field[..text.len()].copy_from_slice(text.as_bytes());
}

pub fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
    bytes[offset..offset + 2].copy_from_slice(&value.to_be_bytes());
}

pub fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b))
}

/// An SFP+ 10G-SR: A0h (256 bytes) and A2h (256 bytes), internally calibrated, flags
/// implemented, values within thresholds.
pub struct Sfp {
    pub a0: [u8; 256],
    pub a2: [u8; 256],
}

impl Sfp {
    pub fn new() -> Self {
        let mut a0 = [0u8; 256];
        a0[0] = 0x03;
        a0[1] = 0x04;
        a0[2] = 0x07; // LC
        put_ascii(&mut a0, 20, 16, "ACME OPTICS");
        a0[37..40].copy_from_slice(&[0x00, 0x1b, 0x21]);
        put_ascii(&mut a0, 40, 16, "SFP-10G-SR");
        put_ascii(&mut a0, 56, 4, "A");
        put_u16(&mut a0, 60, 850);
        put_ascii(&mut a0, 68, 16, "SN0001");
        put_ascii(&mut a0, 84, 8, "240131");
        a0[92] = 0x68; // implemented, internally calibrated, average RX power
        a0[93] = 0x80; // alarm/warning flags implemented
        a0[94] = 0x08; // SFF-8472 rev 12.3
        let mut a2 = [0u8; 256];
        // Thresholds: HA, LA, HW, LW for temperature, Vcc, bias, TX, RX power.
        for (i, v) in [80 * 256, (-5i16 * 256) as u16, 75 * 256, 0]
            .iter()
            .enumerate()
        {
            put_u16(&mut a2, 2 * i, *v);
        }
        for (i, v) in [36000, 30000, 35000, 31000].iter().enumerate() {
            put_u16(&mut a2, 8 + 2 * i, *v);
        }
        for (i, v) in [7500, 1000, 7000, 1500].iter().enumerate() {
            put_u16(&mut a2, 16 + 2 * i, *v);
        }
        for (i, v) in [15849, 1000, 10000, 1259].iter().enumerate() {
            put_u16(&mut a2, 24 + 2 * i, *v);
        }
        for (i, v) in [10000, 100, 7943, 126].iter().enumerate() {
            put_u16(&mut a2, 32 + 2 * i, *v);
        }
        // Readings: 44.3477 C, 3.3034 V, 10.126 mA, 0.5970 mW, 0.3500 mW.
        put_u16(&mut a2, 96, 0x2c59);
        put_u16(&mut a2, 98, 33034);
        put_u16(&mut a2, 100, 5063);
        put_u16(&mut a2, 102, 5970);
        put_u16(&mut a2, 104, 3500);
        Sfp { a0, a2 }
    }

    pub fn fix_checksums(&mut self) {
        self.a0[63] = sum(&self.a0[0..63]);
        self.a0[95] = sum(&self.a0[64..95]);
        self.a2[95] = sum(&self.a2[0..95]);
    }

    /// ethtool's linear layout: A0h then A2h, checksums fixed.
    pub fn linear(mut self) -> Vec<u8> {
        self.fix_checksums();
        let mut out = self.a0.to_vec();
        out.extend_from_slice(&self.a2);
        out
    }
}

/// A QSFP28 100G-SR4: lower page, upper pages 00h-03h in ethtool's linear layout.
pub struct Qsfp {
    pub bytes: [u8; 640],
}

impl Qsfp {
    pub fn new() -> Self {
        let mut b = [0u8; 640];
        b[0] = 0x11;
        b[1] = 0x07; // SFF-8636 Rev 2.5/2.6/2.7
        put_u16(&mut b, 22, 39 * 256 + 128); // 39.5 C
        put_u16(&mut b, 26, 33000); // 3.3 V
        for lane in 0..4 {
            put_u16(&mut b, 34 + 2 * lane, 8000 + 100 * lane as u16); // RX power
            put_u16(&mut b, 42 + 2 * lane, 3500 + 10 * lane as u16); // bias
            put_u16(&mut b, 50 + 2 * lane, 7000 + 100 * lane as u16); // TX power
        }
        b[128] = 0x11;
        b[130] = 0x0c; // MPO
        put_ascii(&mut b, 148, 16, "ACME OPTICS");
        b[165..168].copy_from_slice(&[0x00, 0x02, 0xc9]);
        put_ascii(&mut b, 168, 16, "QSFP-100G-SR4");
        put_ascii(&mut b, 184, 2, "A2");
        put_u16(&mut b, 186, 850 * 20);
        b[195] = 0x0a; // TX LOS and TX fault reported
        put_ascii(&mut b, 196, 16, "QSN0001");
        put_ascii(&mut b, 212, 8, "231231");
        b[220] = 0x0c; // average RX power, TX power measured
                       // Page 03h at 0x200: temperature 0x80, Vcc 0x90, RX 0xb0, bias 0xb8, TX 0xc0.
        let p3 = 0x200 - 0x80;
        for (i, v) in [80 * 256, (-10i16 * 256) as u16, 70 * 256, 0]
            .iter()
            .enumerate()
        {
            put_u16(&mut b, p3 + 0x80 + 2 * i, *v);
        }
        for (i, v) in [35000, 31000, 34650, 31350].iter().enumerate() {
            put_u16(&mut b, p3 + 0x90 + 2 * i, *v);
        }
        for (i, v) in [34673, 467, 17378, 933].iter().enumerate() {
            put_u16(&mut b, p3 + 0xb0 + 2 * i, *v);
        }
        for (i, v) in [4250, 2746, 4000, 3000].iter().enumerate() {
            put_u16(&mut b, p3 + 0xb8 + 2 * i, *v);
        }
        for (i, v) in [34673, 724, 17378, 1445].iter().enumerate() {
            put_u16(&mut b, p3 + 0xc0 + 2 * i, *v);
        }
        Qsfp { bytes: b }
    }

    pub fn linear(mut self) -> Vec<u8> {
        self.bytes[191] = sum(&self.bytes[128..191]);
        self.bytes[223] = sum(&self.bytes[192..223]);
        self.bytes.to_vec()
    }
}

/// A QSFP-DD 400G (CMIS 5.0): lower page and pages 00h, 01h, 02h, and page 11h of each
/// bank, as (bank, page, bytes) for `Eeprom::insert_page`.
pub struct Cmis {
    pub lower: [u8; 128],
    pub page00: [u8; 128],
    pub page01: [u8; 128],
    pub page02: [u8; 128],
    pub page11: Vec<[u8; 128]>,
}

/// An upper page's byte at its CMIS offset (128-255).
pub fn up(page: &mut [u8; 128], offset: usize) -> &mut u8 {
    &mut page[offset - 128]
}

impl Cmis {
    pub fn new(banks: usize) -> Self {
        let mut lower = [0u8; 128];
        lower[0] = 0x18;
        lower[1] = 0x50;
        lower[3] = 0x03 << 1; // ModuleReady
        put_u16(&mut lower, 14, 50 * 256); // 50 C
        put_u16(&mut lower, 16, 33000);
        let mut page00 = [0u8; 128];
        page00[0] = 0x18;
        put_ascii(&mut page00, 129 - 128, 16, "ACME OPTICS");
        page00[145 - 128..148 - 128].copy_from_slice(&[0x70, 0xee, 0xa3]);
        put_ascii(&mut page00, 148 - 128, 16, "QDD-400G-DR4");
        put_ascii(&mut page00, 164 - 128, 2, "01");
        put_ascii(&mut page00, 166 - 128, 16, "CSN0001");
        put_ascii(&mut page00, 182 - 128, 8, "250428");
        *up(&mut page00, 203) = 0x0c;
        let mut page01 = [0u8; 128];
        put_u16(&mut page01, 138 - 128, 1311 * 20);
        *up(&mut page01, 142) = if banks == 2 { 0x01 } else { 0x00 };
        *up(&mut page01, 151) = 0x10; // average RX power
        *up(&mut page01, 157) = 0x03; // TX fault and TX LOS flags
        *up(&mut page01, 158) = 0x02; // RX LOS flag
        *up(&mut page01, 159) = 0x03; // temperature and supply voltage monitors
        *up(&mut page01, 160) = 0x07; // bias, TX and RX power monitors, multiplier 1
        let mut page02 = [0u8; 128];
        for (i, v) in [75 * 256, (-5i16 * 256) as u16, 70 * 256, 0]
            .iter()
            .enumerate()
        {
            put_u16(&mut page02, 2 * i, *v);
        }
        for (i, v) in [36300, 30500, 34650, 31350].iter().enumerate() {
            put_u16(&mut page02, 8 + 2 * i, *v);
        }
        for (i, v) in [35481, 4074, 28184, 5129].iter().enumerate() {
            put_u16(&mut page02, 0x30 + 2 * i, *v);
        }
        for (i, v) in [65000, 5000, 62500, 7500].iter().enumerate() {
            put_u16(&mut page02, 0x38 + 2 * i, *v);
        }
        for (i, v) in [35481, 1288, 28184, 2042].iter().enumerate() {
            put_u16(&mut page02, 0x40 + 2 * i, *v);
        }
        let page11 = (0..banks)
            .map(|bank| {
                let mut p = [0u8; 128];
                p[..4].fill(0x44); // page 11h 128-131: every lane's data path DPActivated
                for lane in 0..8 {
                    let n = (bank * 8 + lane) as u16;
                    put_u16(&mut p, 154 - 128 + 2 * lane, 15000 + n); // TX power
                    put_u16(&mut p, 170 - 128 + 2 * lane, 40000 + n); // bias
                    put_u16(&mut p, 186 - 128 + 2 * lane, 20000 + n); // RX power
                }
                p
            })
            .collect();
        Cmis {
            lower,
            page00,
            page01,
            page02,
            page11,
        }
    }

    pub fn eeprom(mut self) -> rocewatch_optics::Eeprom {
        self.page00[222 - 128] = sum(&self.page00[0..94]);
        let mut e = rocewatch_optics::Eeprom::new(self.lower);
        e.insert_page(0, 0x00, self.page00);
        e.insert_page(0, 0x01, self.page01);
        e.insert_page(0, 0x02, self.page02);
        for (bank, page) in self.page11.into_iter().enumerate() {
            e.insert_page(bank as u8, 0x11, page);
        }
        e
    }
}
