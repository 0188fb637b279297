//! A stream entry as the hand-off reads it: the row it becomes, or why it is no order.

use super::store::OrderRow;

/// The row of one stream entry; the reason when the entry is not an order.
pub(super) fn order_row(
    sku: &str,
    epoch: u64,
    id: &str,
    fields: &[(String, String)],
) -> Result<OrderRow, &'static str> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let order_id = field("order_id").filter(|id| !id.is_empty());
    let user_id = field("user_id").filter(|user| !user.is_empty());
    let (Some(order_id), Some(user_id)) = (order_id, user_id) else {
        return Err("no order_id or user_id");
    };
    let quantity = field("quantity")
        .and_then(|quantity| quantity.parse::<i64>().ok())
        .filter(|quantity| *quantity > 0)
        .ok_or("no valid quantity")?;
    let sale_epoch = match field("epoch") {
        Some(epoch) => epoch.parse::<i64>().map_err(|_| "no valid epoch")?,
        None => i64::try_from(epoch).map_err(|_| "no valid epoch")?,
    };
    let ordered_at_ms = entry_ms(id)
        .and_then(|ms| i64::try_from(ms).ok())
        .ok_or("no valid entry id")?;
    Ok(OrderRow {
        order_id: order_id.to_owned(),
        sku: sku.to_owned(),
        sale_epoch,
        user_id: user_id.to_owned(),
        quantity,
        ordered_at_ms,
    })
}

/// The Redis time (ms) in a stream entry's id.
pub(super) fn entry_ms(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn an_entry_becomes_a_row_with_its_epoch_and_time() {
        let entry = fields(&[
            ("order_id", "o-1"),
            ("user_id", "u-1"),
            ("quantity", "2"),
            ("idempotency_key", ""),
            ("epoch", "7"),
        ]);
        let row = order_row("phone", 3, "1795000000123-4", &entry).unwrap();
        assert_eq!(row.sale_epoch, 7);
        assert_eq!(row.ordered_at_ms, 1_795_000_000_123);
        assert_eq!(row.quantity, 2);
        // An entry from before entries carried their epoch takes the stream's.
        let old = fields(&[("order_id", "o-2"), ("user_id", "u-1"), ("quantity", "1")]);
        assert_eq!(order_row("phone", 3, "1-0", &old).unwrap().sale_epoch, 3);
    }

    #[test]
    fn an_entry_that_is_no_order_is_refused() {
        let bad = fields(&[("order_id", "o-1"), ("user_id", "u-1"), ("quantity", "x")]);
        assert!(order_row("phone", 1, "1-0", &bad).is_err());
        let empty = fields(&[("quantity", "1")]);
        assert!(order_row("phone", 1, "1-0", &empty).is_err());
    }
}
