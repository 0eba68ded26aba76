import unittest
from decimal import Decimal

from tally.money import Money
from tally.tax import (
    GST_AU,
    VAT_DE,
    VAT_UK,
    ZERO_RATED,
    TaxRate,
    net_of_inclusive,
    parse_rate,
    rate_for_region,
)


class ExclusiveTaxTest(unittest.TestCase):
    def test_tax_on_top_of_net(self):
        self.assertEqual(VAT_UK.tax_on(Money("100.00", "GBP")), Money("20.00", "GBP"))
        self.assertEqual(VAT_UK.gross_of(Money("100.00", "GBP")), Money("120.00", "GBP"))

    def test_tax_is_rounded_per_line(self):
        # 19% of 0.05 is 0.0095, which rounds up to one cent.
        self.assertEqual(VAT_DE.tax_on(Money("0.05", "EUR")), Money("0.01", "EUR"))

    def test_zero_rated(self):
        self.assertTrue(ZERO_RATED.tax_on(Money("80.00")).is_zero())


class InclusiveTaxTest(unittest.TestCase):
    def test_carves_tax_out_of_the_price(self):
        self.assertEqual(GST_AU.tax_on(Money("110.00", "AUD")), Money("10.00", "AUD"))

    def test_price_is_unchanged(self):
        self.assertEqual(GST_AU.gross_of(Money("110.00", "AUD")), Money("110.00", "AUD"))

    def test_net_of_inclusive_rounds_to_cents(self):
        self.assertEqual(net_of_inclusive(Money("9.99", "GBP"), Decimal("0.20")), Money("8.33", "GBP"))


class RateTest(unittest.TestCase):
    def test_labels(self):
        self.assertEqual(VAT_UK.label, "VAT 20%")
        self.assertEqual(GST_AU.label, "GST 10% incl.")

    def test_out_of_range_rate(self):
        with self.assertRaises(ValueError):
            TaxRate("Bad", Decimal("1.2"))

    def test_parse_rate(self):
        self.assertEqual(parse_rate("19%"), Decimal("0.19"))
        self.assertEqual(parse_rate(" 7.5 % "), Decimal("0.075"))
        self.assertEqual(parse_rate("0.2"), Decimal("0.2"))

    def test_parse_rate_errors(self):
        for text in ("", "abc", "120%", "-5%"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_rate(text)

    def test_region_lookup(self):
        self.assertIs(rate_for_region("de"), VAT_DE)
        self.assertIs(rate_for_region("NZ"), ZERO_RATED)


if __name__ == "__main__":
    unittest.main()
