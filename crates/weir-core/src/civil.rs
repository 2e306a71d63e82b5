//! Dates and numbers as text, digit by digit: the formatting that runs per value per row
//! (`DATE_FORMAT`, timestamps written to CSV), where `format!` or a date library parsing its
//! pattern for each value costs more than everything else in the row.

use std::fmt::Write;

/// Year, month, day of a day number (days since 1970-01-01), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// [`civil_from_days`] remembering the last day asked: a stream's rows come mostly in time
/// order, so most fall on the day of the row before.
#[derive(Default)]
pub struct Days {
    last: Option<(i64, (i64, u32, u32))>,
}

impl Days {
    pub fn civil(&mut self, days: i64) -> (i64, u32, u32) {
        match self.last {
            Some((n, date)) if n == days => date,
            _ => {
                let date = civil_from_days(days);
                self.last = Some((days, date));
                date
            }
        }
    }
}

/// `value` in decimal, zero-padded to `width` digits.
pub fn push_padded(out: &mut String, value: i64, width: usize) {
    if value < 0 {
        let _ = write!(out, "{value:0width$}");
        return;
    }
    let mut digits = [b'0'; 20];
    let mut n = value as u64;
    let mut len = 0;
    while n > 0 || len == 0 {
        digits[19 - len] = b'0' + (n % 10) as u8;
        n /= 10;
        len += 1;
    }
    for _ in len..width {
        out.push('0');
    }
    for d in &digits[20 - len..] {
        out.push(char::from(*d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_around_the_epoch_leap_days_and_centuries() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-25_508), (1900, 3, 1));
        assert_eq!(civil_from_days(19_358), (2023, 1, 1));
    }

    #[test]
    fn padded_numbers() {
        let mut s = String::new();
        push_padded(&mut s, 7, 3);
        push_padded(&mut s, 0, 1);
        push_padded(&mut s, 12345, 2);
        push_padded(&mut s, -5, 3);
        assert_eq!(s, "007012345-05");
    }
}
