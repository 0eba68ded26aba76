import unittest
from datetime import date
from decimal import Decimal

from tally.discounts import AmountOff, PercentOff, VolumeDiscount
from tally.invoice import Invoice, LineItem
from tally.money import CurrencyMismatch, Money
from tally.tax import GST_AU, VAT_UK
from tally.terms import parse_terms


def make_invoice(**overrides):
    fields = {
        "number": "INV-0042",
        "customer": "Harbour Lane Books",
        "currency": "USD",
        "issued": date(2024, 3, 4),
    }
    fields.update(overrides)
    return Invoice(**fields)


class LineItemTest(unittest.TestCase):
    def test_gross_net_and_total(self):
        line = LineItem("Poster, A2", Money("12.50"), quantity=4, discount=PercentOff(Decimal("0.1")))
        self.assertEqual(line.gross, Money("50.00"))
        self.assertEqual(line.discount_amount, Money("5.00"))
        self.assertEqual(line.net, Money("45.00"))
        self.assertEqual(line.total, Money("45.00"))

    def test_tax_on_the_discounted_net(self):
        coupon = AmountOff(Money("10.00", "GBP"))
        line = LineItem("Cards", Money("2.00", "GBP"), 30, tax_rate=VAT_UK, discount=coupon)
        self.assertEqual(line.net, Money("50.00", "GBP"))
        self.assertEqual(line.tax, Money("10.00", "GBP"))
        self.assertEqual(line.total, Money("60.00", "GBP"))

    def test_quantity_must_be_positive(self):
        with self.assertRaises(ValueError):
            LineItem("Nothing", Money("1.00"), quantity=0)

    def test_description_required(self):
        with self.assertRaises(ValueError):
            LineItem("  ", Money("1.00"))


class TotalsTest(unittest.TestCase):
    def test_empty_invoice(self):
        invoice = make_invoice()
        self.assertEqual(invoice.total, Money.zero("USD"))
        self.assertEqual(len(invoice), 0)

    def test_totals_add_up(self):
        invoice = make_invoice(currency="GBP")
        invoice.add_line("Letterpress cards, A6", Money("1.80", "GBP"), 60, VAT_UK, VolumeDiscount())
        invoice.add_line("Design hour", Money("45.00", "GBP"), 2, VAT_UK)
        self.assertEqual(invoice.subtotal, Money("198.00", "GBP"))
        self.assertEqual(invoice.discount_total, Money("10.80", "GBP"))
        self.assertEqual(invoice.net_total, Money("187.20", "GBP"))
        self.assertEqual(invoice.tax_total, Money("37.44", "GBP"))
        self.assertEqual(invoice.total, Money("224.64", "GBP"))

    def test_volume_discount_applies_from_tier_quantity(self):
        # The README promises 5% off "at 10 or more units".
        invoice = make_invoice()
        invoice.add_line("Notebook, A5 dotted", Money("10.00"), quantity=10, discount=VolumeDiscount())
        self.assertEqual(invoice.total, Money("95.00"))

    def test_volume_discount_below_first_tier(self):
        invoice = make_invoice()
        invoice.add_line("Notebook, A5 dotted", Money("10.00"), quantity=9, discount=VolumeDiscount())
        self.assertEqual(invoice.total, Money("90.00"))

    def test_inclusive_tax_does_not_change_the_total(self):
        invoice = make_invoice(currency="AUD")
        invoice.add_line("Framed print", Money("110.00", "AUD"), 1, GST_AU)
        self.assertEqual(invoice.total, Money("110.00", "AUD"))
        self.assertEqual(invoice.tax_total, Money("10.00", "AUD"))

    def test_tax_breakdown_by_label(self):
        invoice = make_invoice(currency="GBP")
        invoice.add_line("Cards", Money("10.00", "GBP"), 3, VAT_UK)
        invoice.add_line("Stamps", Money("0.85", "GBP"), 12)
        invoice.add_line("Envelopes", Money("4.00", "GBP"), 5, VAT_UK)
        self.assertEqual(invoice.tax_breakdown(), {"VAT 20%": Money("10.00", "GBP")})

    def test_currency_must_match(self):
        invoice = make_invoice()
        with self.assertRaises(CurrencyMismatch):
            invoice.add_line("Imported paper", Money("30.00", "EUR"))


class PaymentsTest(unittest.TestCase):
    def test_balance_after_partial_payment(self):
        invoice = make_invoice()
        invoice.add_line("Banner", Money("120.00"))
        self.assertEqual(invoice.record_payment(Money("50.00")), Money("70.00"))
        self.assertTrue(invoice.is_overdue(date(2024, 4, 5)))
        self.assertEqual(invoice.days_overdue(date(2024, 4, 5)), 2)

    def test_paid_invoice_is_never_overdue(self):
        invoice = make_invoice()
        invoice.add_line("Banner", Money("120.00"))
        invoice.record_payment(Money("120.00"))
        self.assertFalse(invoice.is_overdue(date(2025, 1, 1)))
        self.assertEqual(invoice.days_overdue(date(2025, 1, 1)), 0)

    def test_payment_must_be_positive(self):
        with self.assertRaises(ValueError):
            make_invoice().record_payment(Money("0.00"))

    def test_early_payment_discount(self):
        invoice = make_invoice(terms=parse_terms("2/10 net 30"))
        invoice.add_line("Flyers", Money("0.25"), 400)
        self.assertEqual(invoice.early_payment_total(date(2024, 3, 10)), Money("98.00"))
        self.assertEqual(invoice.early_payment_total(date(2024, 3, 20)), Money("100.00"))


if __name__ == "__main__":
    unittest.main()
