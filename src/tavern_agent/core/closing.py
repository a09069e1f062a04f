"""Objects released by ``await aclose()`` that ``async with`` also closes."""

from __future__ import annotations

from typing import Self


class AsyncClosing:
    """A resource whose ``aclose`` releases it; ``async with`` closes it on the way out.

    A subclass defines ``aclose``; entering returns the object as it is.
    """

    async def aclose(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
