import unittest
from decimal import Decimal

from tally.money import CurrencyMismatch, Money, percent_text, quantum, round_amount, total


class RoundingTest(unittest.TestCase):
    def test_rounds_half_up_to_cents(self):
        self.assertEqual(Money("10.005").amount, Decimal("10.01"))
        self.assertEqual(Money("10.004").amount, Decimal("10.00"))

    def test_negative_amounts_round_away_from_zero_at_half(self):
        self.assertEqual(Money("-2.345").amount, Decimal("-2.35"))

    def test_currency_without_minor_unit(self):
        self.assertEqual(Money("1234.5", "JPY").amount, Decimal("1235"))

    def test_three_decimal_currency(self):
        self.assertEqual(Money("1.2345", "KWD").amount, Decimal("1.235"))

    def test_quantum(self):
        self.assertEqual(quantum("USD"), Decimal("0.01"))
        self.assertEqual(quantum("JPY"), Decimal("1"))

    def test_unknown_currency_is_rejected(self):
        with self.assertRaises(ValueError):
            Money("1.00", "XXX")

    def test_floats_are_rejected(self):
        with self.assertRaises(TypeError):
            round_amount(0.1, "USD")

    def test_garbage_is_rejected(self):
        with self.assertRaises(ValueError):
            Money("twelve")

    def test_currency_code_is_normalised(self):
        self.assertEqual(Money("1.00", "eur").currency, "EUR")


class ArithmeticTest(unittest.TestCase):
    def test_add_and_subtract(self):
        self.assertEqual(Money("0.10") + Money("0.20"), Money("0.30"))
        self.assertEqual(Money("5.00") - Money("7.25"), Money("-2.25"))

    def test_mixed_currencies_raise(self):
        with self.assertRaises(CurrencyMismatch):
            Money("1.00", "USD") + Money("1.00", "EUR")
        with self.assertRaises(CurrencyMismatch):
            _ = Money("1.00", "USD") < Money("1.00", "EUR")

    def test_multiply_by_quantity_and_rate(self):
        self.assertEqual(Money("19.99") * 3, Money("59.97"))
        self.assertEqual(3 * Money("19.99"), Money("59.97"))
        self.assertEqual(Money("80.00").percent(Decimal("0.075")), Money("6.00"))

    def test_multiplying_two_amounts_is_an_error(self):
        with self.assertRaises(TypeError):
            Money("2.00") * Money("3.00")

    def test_sum_starts_from_zero(self):
        self.assertEqual(sum([Money("1.50"), Money("2.50")]), Money("4.00"))
        self.assertEqual(total([], "GBP"), Money.zero("GBP"))

    def test_ordering(self):
        self.assertLess(Money("1.00"), Money("1.01"))
        self.assertEqual(max(Money("3.00"), Money("12.00")), Money("12.00"))


class AllocateTest(unittest.TestCase):
    def test_even_split_keeps_every_cent(self):
        parts = Money("10.00").allocate([1, 1, 1])
        self.assertEqual(parts, [Money("3.34"), Money("3.33"), Money("3.33")])
        self.assertEqual(sum(parts), Money("10.00"))

    def test_weighted_split(self):
        parts = Money("100.00").allocate([70, 20, 10])
        self.assertEqual(parts, [Money("70.00"), Money("20.00"), Money("10.00")])

    def test_bad_ratios(self):
        with self.assertRaises(ValueError):
            Money("1.00").allocate([0, 0])


class DisplayTest(unittest.TestCase):
    def test_str_and_repr(self):
        self.assertEqual(str(Money("12.5", "EUR")), "EUR 12.50")
        self.assertEqual(repr(Money("12.5", "EUR")), "Money('12.50', 'EUR')")

    def test_format_with_symbol_and_grouping(self):
        self.assertEqual(Money("1234567.5").format(), "$1,234,567.50")
        self.assertEqual(Money("-3.20", "GBP").format(), "-£3.20")
        self.assertEqual(Money("99.95", "CHF").format(), "99.95 CHF")

    def test_parse(self):
        self.assertEqual(Money.parse("USD 12.50"), Money("12.50"))
        self.assertEqual(Money.parse("12.50 EUR"), Money("12.50", "EUR"))
        self.assertEqual(Money.parse("$1,200.00"), Money("1200.00"))
        with self.assertRaises(ValueError):
            Money.parse("12.50")

    def test_percent_text(self):
        self.assertEqual(percent_text(Decimal("0.175")), "17.5%")
        self.assertEqual(percent_text(Decimal("0.05")), "5%")


if __name__ == "__main__":
    unittest.main()
