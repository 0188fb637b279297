-- The sale's orders, one row each, stored by the hand-off exactly once.
CREATE TABLE IF NOT EXISTS orders (
    order_id      TEXT PRIMARY KEY,
    sku           TEXT NOT NULL,
    sale_epoch    INTEGER NOT NULL,
    user_id       TEXT NOT NULL,
    quantity      INTEGER NOT NULL,
    ordered_at_ms INTEGER NOT NULL,
    stored_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
-- One sale's orders (and its reconciliation), and one user's orders.
CREATE INDEX IF NOT EXISTS orders_by_sale ON orders (sku, sale_epoch, ordered_at_ms);
CREATE INDEX IF NOT EXISTS orders_by_user ON orders (user_id, ordered_at_ms);
