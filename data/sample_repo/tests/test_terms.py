import unittest
from datetime import date
from decimal import Decimal

from tally.terms import (
    DUE_ON_RECEIPT,
    NET_30,
    PaymentTerms,
    add_business_days,
    days_overdue,
    end_of_month,
    next_weekday,
    parse_terms,
)


class DueDateTest(unittest.TestCase):
    def test_net_30(self):
        # 4 March 2024 is a Monday; 3 April is a Wednesday.
        self.assertEqual(NET_30.due_date(date(2024, 3, 4)), date(2024, 4, 3))

    def test_weekend_moves_to_monday(self):
        # 30 days after 1 March 2024 is Sunday 31 March.
        self.assertEqual(NET_30.due_date(date(2024, 3, 1)), date(2024, 4, 1))

    def test_due_on_receipt(self):
        self.assertEqual(DUE_ON_RECEIPT.due_date(date(2024, 5, 15)), date(2024, 5, 15))

    def test_end_of_month_terms(self):
        terms = parse_terms("EOM 30")
        # End of January 2024 is the 31st; 30 days later is 1 March (leap year).
        self.assertEqual(terms.due_date(date(2024, 1, 10)), date(2024, 3, 1))

    def test_end_of_month_helper(self):
        self.assertEqual(end_of_month(date(2023, 2, 3)), date(2023, 2, 28))
        self.assertEqual(end_of_month(date(2024, 2, 3)), date(2024, 2, 29))

    def test_next_weekday(self):
        self.assertEqual(next_weekday(date(2024, 6, 7)), date(2024, 6, 7))
        self.assertEqual(next_weekday(date(2024, 6, 8)), date(2024, 6, 10))


class ParseTermsTest(unittest.TestCase):
    def test_net(self):
        self.assertEqual(parse_terms("Net 45").days, 45)
        self.assertEqual(parse_terms("net45").name, "Net 45")

    def test_receipt(self):
        self.assertIs(parse_terms("Due on receipt"), DUE_ON_RECEIPT)

    def test_early_payment(self):
        terms = parse_terms("2/10 net 30")
        self.assertEqual((terms.days, terms.early_days), (30, 10))
        self.assertEqual(terms.early_rate, Decimal("0.02"))

    def test_unknown(self):
        with self.assertRaises(ValueError):
            parse_terms("whenever")

    def test_early_window_must_fit(self):
        with self.assertRaises(ValueError):
            PaymentTerms("odd", days=10, early_days=20, early_rate=Decimal("0.01"))


class EarlyPaymentTest(unittest.TestCase):
    def test_deadline_is_inclusive(self):
        terms = parse_terms("2/10 net 30")
        issued = date(2024, 3, 4)
        self.assertTrue(terms.early_discount_applies(issued, date(2024, 3, 14)))
        self.assertFalse(terms.early_discount_applies(issued, date(2024, 3, 15)))

    def test_no_early_terms(self):
        self.assertIsNone(NET_30.early_deadline(date(2024, 3, 4)))


class BusinessDaysTest(unittest.TestCase):
    def test_skips_weekends(self):
        # Friday + 1 business day is Monday.
        self.assertEqual(add_business_days(date(2024, 6, 7), 1), date(2024, 6, 10))
        self.assertEqual(add_business_days(date(2024, 6, 3), 10), date(2024, 6, 17))

    def test_skips_holidays(self):
        christmas, boxing_day = date(2024, 12, 25), date(2024, 12, 26)
        result = add_business_days(date(2024, 12, 24), 1, holidays=[christmas, boxing_day])
        self.assertEqual(result, date(2024, 12, 27))

    def test_zero_days(self):
        self.assertEqual(add_business_days(date(2024, 6, 8), 0), date(2024, 6, 8))

    def test_days_overdue(self):
        self.assertEqual(days_overdue(date(2024, 4, 3), date(2024, 4, 10)), 7)
        self.assertEqual(days_overdue(date(2024, 4, 3), date(2024, 4, 1)), 0)


if __name__ == "__main__":
    unittest.main()
