"""Money amounts with a currency, backed by ``Decimal``.

Floats cannot represent most cents exactly, so every amount is a ``Decimal``
rounded to its currency's minor unit when it is created. Two amounts can only
be combined when their currencies match.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

# Decimal places per currency (the ISO 4217 "minor unit").
MINOR_UNITS = {
    "USD": 2,
    "EUR": 2,
    "GBP": 2,
    "CHF": 2,
    "AUD": 2,
    "JPY": 0,
    "KWD": 3,
}

SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}

Number = int | str | Decimal


class CurrencyMismatch(ValueError):
    """Raised when amounts in different currencies are added or compared."""


def quantum(currency: str) -> Decimal:
    """The smallest amount of ``currency``: ``Decimal('0.01')`` for USD, ``Decimal('1')`` for JPY."""
    try:
        places = MINOR_UNITS[currency]
    except KeyError:
        raise ValueError(f"unknown currency: {currency!r}") from None
    return Decimal(1).scaleb(-places)


def round_amount(value: Number, currency: str) -> Decimal:
    """Round ``value`` half-up to the minor unit of ``currency``."""
    if isinstance(value, float):
        raise TypeError("amounts must be str, int or Decimal, not float")
    try:
        return Decimal(value).quantize(quantum(currency), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        raise ValueError(f"not an amount: {value!r}") from None


@dataclass(frozen=True)
class Money:
    """An amount of one currency, exact to its minor unit.

    >>> Money("10.005", "USD")
    Money('10.01', 'USD')
    """

    amount: Decimal
    currency: str = "USD"

    def __post_init__(self) -> None:
        object.__setattr__(self, "currency", self.currency.upper())
        object.__setattr__(self, "amount", round_amount(self.amount, self.currency))


    @classmethod
    def zero(cls, currency: str = "USD") -> Money:
        return cls(Decimal(0), currency)

    @classmethod
    def parse(cls, text: str) -> Money:
        """Read ``"USD 12.50"``, ``"12.50 USD"`` or ``"$12.50"``."""
        text = text.strip().replace(",", "")
        for code, symbol in SYMBOLS.items():
            if text.startswith(symbol):
                return cls(text[len(symbol):].strip(), code)
        parts = text.split()
        if len(parts) != 2:
            raise ValueError(f"cannot parse money: {text!r}")
        first, second = parts
        if first.isalpha():
            return cls(second, first)
        return cls(first, second)


    def _check(self, other: object) -> Money:
        if not isinstance(other, Money):
            raise TypeError(f"expected Money, got {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatch(f"{self.currency} and {other.currency}")
        return other

    def __add__(self, other: Money) -> Money:
        other = self._check(other)
        return Money(self.amount + other.amount, self.currency)

    def __radd__(self, other: object) -> Money:
        # Lets sum() start from its default 0.
        if other == 0:
            return self
        return self.__add__(other)  # type: ignore[arg-type]

    def __sub__(self, other: Money) -> Money:
        other = self._check(other)
        return Money(self.amount - other.amount, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount, self.currency)

    def __mul__(self, factor: Number) -> Money:
        if isinstance(factor, Money | float):
            raise TypeError("multiply Money by an int, str or Decimal")
        return Money(self.amount * Decimal(factor), self.currency)

    __rmul__ = __mul__

    def percent(self, rate: Decimal) -> Money:
        """This amount times ``rate`` (a fraction: ``Decimal("0.2")`` is 20%), rounded."""
        return self * rate

    def allocate(self, ratios: list[int]) -> list[Money]:
        """Split into parts proportional to ``ratios`` that add up to exactly this amount.

        Leftover minor units go to the first parts, one each.

        >>> [str(m) for m in Money("10.00").allocate([1, 1, 1])]
        ['USD 3.34', 'USD 3.33', 'USD 3.33']
        """
        if not ratios or any(r < 0 for r in ratios) or sum(ratios) == 0:
            raise ValueError("ratios must be non-negative and not all zero")
        unit = quantum(self.currency)
        units = int(self.amount / unit)
        total = sum(ratios)
        shares = [units * r // total for r in ratios]
        for i in range(units - sum(shares)):
            shares[i % len(shares)] += 1
        return [Money(share * unit, self.currency) for share in shares]


    def __lt__(self, other: Money) -> bool:
        return self.amount < self._check(other).amount

    def __le__(self, other: Money) -> bool:
        return self.amount <= self._check(other).amount

    def __gt__(self, other: Money) -> bool:
        return self.amount > self._check(other).amount

    def __ge__(self, other: Money) -> bool:
        return self.amount >= self._check(other).amount

    def is_zero(self) -> bool:
        return self.amount == 0


    def __str__(self) -> str:
        return f"{self.currency} {self.amount}"

    def __repr__(self) -> str:
        return f"Money('{self.amount}', '{self.currency}')"

    def format(self) -> str:
        """``$1,234.50`` style, with the currency code when there is no symbol."""
        number = f"{self.amount:,}"
        symbol = SYMBOLS.get(self.currency)
        if symbol is None:
            return f"{number} {self.currency}"
        if number.startswith("-"):
            return f"-{symbol}{number[1:]}"
        return f"{symbol}{number}"


def percent_text(rate: Decimal) -> str:
    """A fraction as a percentage for display: ``Decimal("0.175")`` is ``"17.5%"``."""
    return f"{(Decimal(rate) * 100).normalize():f}%"


def total(amounts: list[Money], currency: str = "USD") -> Money:
    """The sum of ``amounts``; zero in ``currency`` when there are none."""
    result = Money.zero(currency)
    for amount in amounts:
        result = result + amount
    return result
