"""When a paged list is taken not to end (`collector.list_end`), page by page."""

from __future__ import annotations

import pytest

from collector.list_end import EndlessList, ListEnd


def test_a_list_that_ends_within_what_its_pages_said_is_never_stopped() -> None:
    end = ListEnd("/apis/apps/v1/deployments", max_pages=4)
    end.page(token="a", remaining=25, objects=1, new=1)
    end.page(token="b", remaining=1, objects=1, new=1)
    end.page(token="c", remaining=0, objects=1, new=1)  # an estimate: one page more is let through
    end.page(token=None, remaining=None, objects=1, new=1)


def test_a_server_that_expires_every_token_cannot_keep_a_list_going() -> None:
    end = ListEnd("/apis/apps/v1/deployments", max_pages=5)
    for _ in range(2):
        end.page(token="a", remaining=None, objects=1, new=1)
        end.restarted()  # the token expired: the same token may come again, the pages count
    end.page(token="a", remaining=None, objects=1, new=1)
    end.page(token="b", remaining=None, objects=1, new=1)
    with pytest.raises(EndlessList, match="the most pages a list may take, after 5 pages"):
        end.page(token="c", remaining=None, objects=1, new=1)


def test_a_negative_remaining_item_count_allows_one_page_more() -> None:
    end = ListEnd("/apis/apps/v1/deployments", max_pages=100)
    end.page(token="a", remaining=-5, objects=1, new=1)
    with pytest.raises(EndlessList, match="remainingItemCount"):
        end.page(token="b", remaining=None, objects=1, new=1)


def test_an_object_listed_again_in_the_same_list_stops_it() -> None:
    end = ListEnd("/apis/apps/v1/deployments", max_pages=100)
    end.page(token="a", remaining=None, objects=10, new=10)
    with pytest.raises(EndlessList, match="an object came twice, after 2 pages"):
        end.page(token="b", remaining=None, objects=10, new=9)
