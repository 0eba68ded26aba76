import csv
import io
import unittest
from datetime import date

from tally.discounts import VolumeDiscount
from tally.invoice import Invoice
from tally.money import Money
from tally.render import CSV_HEADER, columns, render_csv, render_reminder, render_text
from tally.tax import VAT_UK
from tally.terms import parse_terms


def shop_invoice():
    invoice = Invoice("INV-0042", "Harbour Lane Books", "USD", date(2024, 3, 4), parse_terms("net 15"))
    invoice.add_line("Business cards", Money("0.12"), 250, discount=VolumeDiscount())
    invoice.add_line("Setup fee", Money("25.00"))
    return invoice


class TextTest(unittest.TestCase):
    def test_header_lines_and_totals(self):
        text = render_text(shop_invoice())
        self.assertIn("Invoice INV-0042", text)
        self.assertIn("Terms: Net 15 (due 2024-03-19)", text)
        self.assertIn("(-4.50) USD 25.50", text)
        self.assertTrue(text.splitlines()[-1].endswith("USD 50.50"))

    def test_method_and_function_agree(self):
        invoice = shop_invoice()
        self.assertEqual(invoice.render(width=72), render_text(invoice, 72))

    def test_no_discount_row_without_discounts(self):
        invoice = Invoice("INV-7", "Quayside Café", "GBP", date(2024, 5, 2))
        invoice.add_line("Menu cards", Money("1.50", "GBP"), 40, VAT_UK)
        text = render_text(invoice)
        self.assertNotIn("Discounts", text)
        self.assertIn("VAT 20%", text)

    def test_long_descriptions_are_cut(self):
        invoice = shop_invoice()
        invoice.add_line("A very long description " * 5, Money("1.00"))
        rows = render_text(invoice).splitlines()
        self.assertTrue(all(len(row) <= 64 for row in rows))
        self.assertTrue(any(row.startswith("1 x A very long") and "…" in row for row in rows))

    def test_columns(self):
        self.assertEqual(columns("Total", "USD 9.50", 20), "Total       USD 9.50")


class CsvTest(unittest.TestCase):
    def test_one_row_per_line(self):
        rows = list(csv.reader(io.StringIO(render_csv(shop_invoice()))))
        self.assertEqual(tuple(rows[0]), CSV_HEADER)
        self.assertEqual(len(rows), 3)
        expected = ["INV-0042", "1", "Business cards", "250", "0.12", "4.50", "25.50", "0.00", "USD"]
        self.assertEqual(rows[1], expected)


class ReminderTest(unittest.TestCase):
    def test_overdue(self):
        text = render_reminder(shop_invoice(), date(2024, 3, 20))
        self.assertIn("is now 1 day overdue", text)
        self.assertIn("$50.50", text)

    def test_not_overdue(self):
        self.assertEqual(render_reminder(shop_invoice(), date(2024, 3, 19)), "")


if __name__ == "__main__":
    unittest.main()
