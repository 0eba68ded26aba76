import unittest
from decimal import Decimal

from tally.discounts import (
    DEFAULT_TIERS,
    AmountOff,
    PercentOff,
    Tier,
    VolumeDiscount,
    best_discount,
    volume_discount,
)
from tally.money import Money


class PercentOffTest(unittest.TestCase):
    def test_takes_a_fraction_of_the_gross(self):
        discount = PercentOff(Decimal("0.10"))
        self.assertEqual(discount.amount_off(Money("45.00"), 3), Money("4.50"))

    def test_rounds_the_discount_to_cents(self):
        discount = PercentOff(Decimal("0.15"))
        self.assertEqual(discount.amount_off(Money("9.99"), 1), Money("1.50"))

    def test_rate_must_be_a_fraction(self):
        with self.assertRaises(ValueError):
            PercentOff(Decimal("15"))

    def test_describe(self):
        self.assertEqual(PercentOff(Decimal("0.125")).describe(), "12.5% off")


class AmountOffTest(unittest.TestCase):
    def test_fixed_amount(self):
        self.assertEqual(AmountOff(Money("5.00")).amount_off(Money("40.00"), 2), Money("5.00"))

    def test_never_more_than_the_line(self):
        self.assertEqual(AmountOff(Money("50.00")).amount_off(Money("12.00"), 1), Money("12.00"))


class VolumeDiscountTest(unittest.TestCase):
    def test_default_tiers(self):
        self.assertEqual([t.min_quantity for t in DEFAULT_TIERS], [10, 50, 100])

    def test_small_orders_get_nothing(self):
        discount = VolumeDiscount()
        self.assertEqual(discount.rate_for(1), Decimal(0))
        self.assertEqual(discount.rate_for(9), Decimal(0))

    def test_rate_grows_with_quantity(self):
        discount = VolumeDiscount()
        self.assertEqual(discount.rate_for(25), Decimal("0.05"))
        self.assertEqual(discount.rate_for(75), Decimal("0.10"))
        self.assertEqual(discount.rate_for(500), Decimal("0.15"))

    def test_amount_off_uses_the_tier_rate(self):
        discount = VolumeDiscount()
        self.assertEqual(discount.amount_off(Money("240.00"), 60), Money("24.00"))

    def test_custom_tiers_need_not_be_sorted(self):
        discount = VolumeDiscount((Tier(20, Decimal("0.08")), Tier(5, Decimal("0.02"))))
        self.assertEqual(discount.rate_for(7), Decimal("0.02"))
        self.assertEqual(discount.rate_for(33), Decimal("0.08"))

    def test_duplicate_tiers_are_rejected(self):
        with self.assertRaises(ValueError):
            VolumeDiscount((Tier(5, Decimal("0.02")), Tier(5, Decimal("0.03"))))

    def test_tier_validation(self):
        with self.assertRaises(ValueError):
            Tier(0, Decimal("0.05"))
        with self.assertRaises(ValueError):
            Tier(10, Decimal("1.5"))

    def test_shortcut(self):
        self.assertEqual(volume_discount(150), Decimal("0.15"))

    def test_describe(self):
        self.assertEqual(
            VolumeDiscount().describe(), "volume (5% from 10, 10% from 50, 15% from 100)"
        )


class BestDiscountTest(unittest.TestCase):
    def test_picks_the_largest(self):
        gross = Money("200.00")
        offers = [PercentOff(Decimal("0.05")), AmountOff(Money("15.00")), VolumeDiscount()]
        self.assertEqual(best_discount(gross, 60, offers), Money("20.00"))

    def test_no_offers(self):
        self.assertEqual(best_discount(Money("10.00", "EUR"), 1, []), Money.zero("EUR"))


if __name__ == "__main__":
    unittest.main()
