"""tally: invoices without floating-point surprises.

The public API, importable from the package root::

    from tally import Invoice, Money, VolumeDiscount, parse_terms
"""

from tally.discounts import (
    DEFAULT_TIERS,
    AmountOff,
    Discount,
    PercentOff,
    Tier,
    VolumeDiscount,
    best_discount,
    volume_discount,
)
from tally.invoice import Invoice, LineItem
from tally.money import CurrencyMismatch, Money, total
from tally.tax import GST_AU, VAT_DE, VAT_UK, ZERO_RATED, TaxRate, parse_rate, rate_for_region
from tally.terms import (
    DUE_ON_RECEIPT,
    NET_15,
    NET_30,
    NET_60,
    PaymentTerms,
    add_business_days,
    parse_terms,
)

__version__ = "0.4.1"

__all__ = [
    "DEFAULT_TIERS",
    "DUE_ON_RECEIPT",
    "GST_AU",
    "NET_15",
    "NET_30",
    "NET_60",
    "VAT_DE",
    "VAT_UK",
    "ZERO_RATED",
    "AmountOff",
    "CurrencyMismatch",
    "Discount",
    "Invoice",
    "LineItem",
    "Money",
    "PaymentTerms",
    "PercentOff",
    "TaxRate",
    "Tier",
    "VolumeDiscount",
    "add_business_days",
    "best_discount",
    "parse_rate",
    "parse_terms",
    "rate_for_region",
    "total",
    "volume_discount",
]
