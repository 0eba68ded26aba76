"""Discounts taken off a line's gross amount.

A discount looks at the line's gross amount (unit price times quantity) and
its quantity, and says how much to take off. It never takes off more than
the gross amount, so a line's net is never negative. A line carries at most
one discount; when several could apply, ``best_discount`` picks the largest.

Volume tiers reward larger orders. Each tier has a minimum quantity and a
rate; a tier applies from its minimum quantity upwards, and the highest
tier a quantity reaches wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from tally.money import Money, percent_text


@dataclass(frozen=True)
class Tier:
    """``rate`` off (a fraction) for orders of ``min_quantity`` units or more."""

    min_quantity: int
    rate: Decimal

    def __post_init__(self) -> None:
        if self.min_quantity < 1:
            raise ValueError("a tier's min_quantity must be at least 1")
        if not Decimal(0) < self.rate < Decimal(1):
            raise ValueError("a tier's rate must be between 0 and 1")


DEFAULT_TIERS: tuple[Tier, ...] = (
    Tier(10, Decimal("0.05")),
    Tier(50, Decimal("0.10")),
    Tier(100, Decimal("0.15")),
)


class Discount:
    """Base class: subclasses implement ``amount_off`` and ``describe``."""

    def amount_off(self, gross: Money, quantity: int) -> Money:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class PercentOff(Discount):
    """A fixed fraction off the line: ``PercentOff(Decimal("0.1"))`` is 10% off."""

    rate: Decimal

    def __post_init__(self) -> None:
        if not Decimal(0) <= self.rate <= Decimal(1):
            raise ValueError("rate must be between 0 and 1")

    def amount_off(self, gross: Money, quantity: int) -> Money:
        return gross.percent(self.rate)

    def describe(self) -> str:
        return f"{percent_text(self.rate)} off"


@dataclass(frozen=True)
class AmountOff(Discount):
    """A fixed amount off the line, capped at the line's gross amount."""

    amount: Money

    def amount_off(self, gross: Money, quantity: int) -> Money:
        return min(self.amount, gross)

    def describe(self) -> str:
        return f"{self.amount} off"


@dataclass(frozen=True)
class VolumeDiscount(Discount):
    """A rate picked by quantity from a tier table (``DEFAULT_TIERS`` unless given)."""

    tiers: Sequence[Tier] = DEFAULT_TIERS

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.tiers, key=lambda tier: tier.min_quantity))
        quantities = [tier.min_quantity for tier in ordered]
        if len(set(quantities)) != len(quantities):
            raise ValueError("two tiers share a min_quantity")
        object.__setattr__(self, "tiers", ordered)

    def rate_for(self, quantity: int) -> Decimal:
        """The rate of the highest tier ``quantity`` reaches, or 0."""
        rate = Decimal(0)
        for tier in self.tiers:
            if quantity > tier.min_quantity:
                rate = tier.rate
        return rate

    def amount_off(self, gross: Money, quantity: int) -> Money:
        return gross.percent(self.rate_for(quantity))

    def describe(self) -> str:
        steps = ", ".join(f"{percent_text(t.rate)} from {t.min_quantity}" for t in self.tiers)
        return f"volume ({steps})"


def volume_discount(quantity: int, tiers: Iterable[Tier] = DEFAULT_TIERS) -> Decimal:
    """The volume rate for ``quantity`` under ``tiers``: a shortcut for one-off lookups."""
    return VolumeDiscount(tuple(tiers)).rate_for(quantity)


def best_discount(gross: Money, quantity: int, discounts: Iterable[Discount]) -> Money:
    """The largest amount any of ``discounts`` would take off (zero if none apply)."""
    best = Money.zero(gross.currency)
    for discount in discounts:
        best = max(best, discount.amount_off(gross, quantity))
    return min(best, gross)
