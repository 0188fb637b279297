-- The sale's orders, one row each, stored by the hand-off exactly once.
CREATE TABLE IF NOT EXISTS orders (
    order_id      TEXT PRIMARY KEY,
    sku           TEXT NOT NULL,
    sale_epoch    BIGINT NOT NULL,
    user_id       TEXT NOT NULL,
    quantity      BIGINT NOT NULL,
    ordered_at_ms BIGINT NOT NULL,
    stored_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- One sale's orders (and its reconciliation), and one user's orders.
CREATE INDEX IF NOT EXISTS orders_by_sale ON orders (sku, sale_epoch, ordered_at_ms);
CREATE INDEX IF NOT EXISTS orders_by_user ON orders (user_id, ordered_at_ms);
