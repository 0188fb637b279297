//! The flash-sale routes: `PUT`/`GET /seckill/{sku}`, `POST`/`GET /seckill/{sku}/orders`.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Number;
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminAccess;
use super::buyer::{Buyer, OrdersReader};
use super::error::ApiError;
use super::extract::{
    ClientIp, IdempotencyKeyHeader, JsonBody, SkuPath, whole_number, whole_number_or,
};
use super::responses::problem_responses;
use super::schema::{IdempotencyKeyText, NameText};
use crate::seckill::{
    Cursor, Order, OrderEntry, OrderRequest, OrdersQuery, PageLimit, Purchase, Quantity,
    RateDecision, SaleState, SaleTerms, Sales, UserId,
};

static RATE_LIMIT: HeaderName = HeaderName::from_static("ratelimit");
static RATE_LIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// `PUT /seckill/{sku}`: the sale's terms.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaleBody {
    /// Units on sale, 0 to 1 000 000 000.
    #[schema(value_type = u64, example = 100)]
    stock: Number,
    /// Most units one user may buy, 1 to 1 000 000 000.
    #[schema(value_type = u64, example = 2)]
    per_user_limit: Number,
    /// Redis slots the sale's stock and records are spread over, 1 to 64
    /// (on a Redis Cluster, distinct masters where there are that many); 1
    /// when absent.
    #[schema(value_type = Option<u64>, example = 1, minimum = 1, maximum = 64)]
    #[serde(default)]
    segments: Option<Number>,
}

/// A sale's state. At every moment `sold + stock == initial_stock`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SaleView {
    #[schema(example = "phone-2026")]
    sku: String,
    stock: u64,
    initial_stock: u64,
    sold: u64,
    per_user_limit: u64,
    /// Orders recorded.
    orders: u64,
    /// Orders the order hand-off stored in its database and acknowledged;
    /// null when no hand-off reads this sale.
    stored: Option<u64>,
    /// Orders recorded in Redis and not yet stored (`orders - stored`);
    /// null when no hand-off reads this sale.
    pending: Option<u64>,
    refused: RefusedView,
    /// The Redis slots the sale is spread over; the other fields are the
    /// whole sale's.
    segments: u64,
}

/// Purchases of the sale refused, by why, as every instance counted them
/// (each adds its counts a few times a second).
#[derive(Debug, Serialize, ToSchema)]
pub struct RefusedView {
    sold_out: u64,
    limit_exceeded: u64,
    rate_limited: u64,
}

impl SaleView {
    fn new(sku: &str, sale: SaleState) -> Self {
        Self {
            sku: sku.to_owned(),
            stock: sale.stock,
            initial_stock: sale.initial_stock,
            sold: sale.sold,
            per_user_limit: sale.per_user_limit,
            orders: sale.orders,
            stored: sale.stored,
            pending: sale.stored.map(|stored| sale.orders.saturating_sub(stored)),
            refused: RefusedView {
                sold_out: sale.refused.sold_out,
                limit_exceeded: sale.refused.limit_exceeded,
                rate_limited: sale.refused.rate_limited,
            },
            segments: sale.segments,
        }
    }
}

/// Every sale.
#[derive(Debug, Serialize, ToSchema)]
pub struct SaleList {
    sales: Vec<SaleView>,
}

/// `POST /seckill/{sku}/orders`: who buys, and how many.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderBody {
    /// The buyer: 1 to 64 characters of `A-Z a-z 0-9 . _ -`. Required,
    /// unless the gateway checks buyer tokens: then the token's `sub` is the
    /// buyer, and a `user_id` here must name the same.
    #[schema(example = "u-17")]
    user_id: Option<String>,
    /// Units, 1 to 1000.
    #[schema(value_type = Option<u64>, default = 1, example = 1)]
    quantity: Option<Number>,
}

/// A recorded order.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderView {
    #[schema(format = Uuid)]
    order_id: String,
    sku: String,
    user_id: String,
    quantity: u64,
    /// Stock left right after this order.
    stock_left: u64,
}

impl From<Order> for OrderView {
    fn from(order: Order) -> Self {
        Self {
            order_id: order.order_id,
            sku: order.sku.to_string(),
            user_id: order.user.to_string(),
            quantity: order.quantity,
            stock_left: order.stock_left,
        }
    }
}

/// One entry of a sale's order record.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderRecord {
    #[schema(format = Uuid)]
    order_id: String,
    user_id: String,
    quantity: u64,
}

/// A page of a sale's recorded orders, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderList {
    sku: String,
    orders: Vec<OrderRecord>,
    /// Where the next page begins (its `cursor`); null on the last page.
    next_cursor: Option<String>,
    /// False when this instance has no orders database while the hand-off
    /// has stored some of the sale's orders: those that left the sale's
    /// stream are missing. List them through an instance started with
    /// `--orders-database`, or read the database's `orders` table. (One
    /// user's orders, `user_id=`, are always complete.)
    complete: bool,
    /// When not complete: how many orders the hand-off has stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    stored: Option<u64>,
}

/// Which orders `GET /seckill/{sku}/orders` lists.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OrdersParams {
    /// Only this user's orders (found without reading anyone else's). With
    /// buyer tokens, a buyer's token lists only its own.
    #[param(value_type = Option<NameText>)]
    user_id: Option<String>,
    /// Orders per page, 1 to 1000.
    #[param(value_type = Option<u64>, default = 100)]
    limit: Option<String>,
    /// The `next_cursor` of the page before, as it was given.
    #[param(value_type = Option<String>)]
    cursor: Option<String>,
}

problem_responses!(
    /// What `PUT /seckill/{sku}` can refuse with.
    ResetProblems:
        MalformedBody, Unauthorized, Forbidden, AdministrationDisabled, LockHeld, BodyTooLarge,
        UnsupportedMediaType, InvalidField, BackendUnavailable, FormatUnsupported,
);

problem_responses!(
    /// What `GET /seckill/{sku}` can refuse with.
    ReadProblems:
        SaleNotFound, InvalidField, BackendUnavailable, FormatUnsupported,
);

problem_responses!(
    /// What `GET /seckill` can refuse with.
    ListProblems:
        Unauthorized, Forbidden, AdministrationDisabled, BackendUnavailable, FormatUnsupported,
);

problem_responses!(
    /// What `GET /seckill/{sku}/orders` can refuse with.
    OrdersProblems:
        Unauthorized, Forbidden, SaleNotFound, InvalidField, BackendUnavailable, FormatUnsupported,
);

problem_responses!(
    /// What `POST /seckill/{sku}/orders` can refuse with.
    PurchaseProblems:
        MalformedBody, Unauthorized, Forbidden, SaleNotFound, SoldOut, LimitExceeded, LockHeld, BodyTooLarge,
        UnsupportedMediaType, InvalidField, IdempotencyKeyReused, RateLimited,
        BackendUnavailable, FormatUnsupported, TooManyWaiters, NotReplicated,
);

/// Create or reset a sale (admin).
///
/// Takes the sale's own lock, so resets never overlap; the old sale's orders,
/// per-user counts and idempotency records are cleared, and every instance
/// forgets that it had sold out.
#[utoipa::path(
    put,
    path = "/seckill/{sku}",
    tag = "seckill",
    params(("sku" = NameText, Path, description = "The product, 1 to 64 of A-Z a-z 0-9 . _ -")),
    request_body = SaleBody,
    security(("admin" = [])),
    responses(
        (status = 200, description = "The new sale", body = SaleView),
        ResetProblems,
    )
)]
pub async fn reset_sale(
    State(sales): State<Sales>,
    _admin: AdminAccess,
    SkuPath(sku): SkuPath,
    JsonBody(body): JsonBody<SaleBody>,
) -> Result<Json<SaleView>, ApiError> {
    let terms = SaleTerms::segmented(
        whole_number("stock", &body.stock)?,
        whole_number("per_user_limit", &body.per_user_limit)?,
        whole_number_or("segments", body.segments.as_ref(), 1)?,
    )?;
    let sale = sales.reset(&sku, terms).await;
    let outcome = if sale.is_ok() { "reset" } else { "failed" };
    super::audit::record("admin", "reset-sale", sku.as_str(), outcome);
    Ok(Json(SaleView::new(sku.as_str(), sale?)))
}

/// Every sale (admin), by sku: what `GET /seckill/{sku}` says of each (at
/// most 1000).
#[utoipa::path(
    get,
    path = "/seckill",
    tag = "seckill",
    security(("admin" = [])),
    responses(
        (status = 200, description = "The sales", body = SaleList),
        ListProblems,
    )
)]
pub async fn sales(
    State(sales): State<Sales>,
    _admin: AdminAccess,
) -> Result<Json<SaleList>, ApiError> {
    let sales = sales.list().await?;
    Ok(Json(SaleList {
        sales: sales
            .into_iter()
            .map(|(sku, sale)| SaleView::new(&sku, sale))
            .collect(),
    }))
}

/// A sale's stock, sales and limit.
#[utoipa::path(
    get,
    path = "/seckill/{sku}",
    tag = "seckill",
    params(("sku" = NameText, Path, description = "The product")),
    responses(
        (status = 200, description = "The sale", body = SaleView),
        ReadProblems,
    )
)]
pub async fn sale(
    State(sales): State<Sales>,
    SkuPath(sku): SkuPath,
) -> Result<Json<SaleView>, ApiError> {
    let sale = sales.sale(&sku).await?;
    Ok(Json(SaleView::new(sku.as_str(), sale)))
}

/// Buy.
///
/// Rate-limited per user across every instance (429 with `Retry-After`;
/// `RateLimit` and `RateLimit-Policy` on every answer that counted against
/// the quota), run under the per-(sku, user) lock, and admitted by one
/// atomic Lua script. Send an `Idempotency-Key` so a retry returns the
/// original order instead of buying again. When the gateway checks buyer
/// tokens, the buyer is the `sub` of the `Authorization: Bearer` JWT.
#[utoipa::path(
    post,
    path = "/seckill/{sku}/orders",
    tag = "seckill",
    security((), ("buyer" = [])),
    params(
        ("sku" = NameText, Path, description = "The product"),
        ("Idempotency-Key" = Option<IdempotencyKeyText>, Header, description = "A fresh client-chosen key (a UUID) per purchase attempt"),
    ),
    request_body = OrderBody,
    responses(
        (status = 201, description = "Ordered", body = OrderView,
            headers(("RateLimit" = String), ("RateLimit-Policy" = String))),
        (status = 200, description = "A replay of an earlier purchase with the same Idempotency-Key and body: the original order", body = OrderView),
        PurchaseProblems,
    )
)]
pub async fn purchase(
    State(sales): State<Sales>,
    buyer: Buyer,
    SkuPath(sku): SkuPath,
    ClientIp(client): ClientIp,
    IdempotencyKeyHeader(idempotency_key): IdempotencyKeyHeader,
    JsonBody(body): JsonBody<OrderBody>,
) -> Result<Response, ApiError> {
    let quantity = whole_number_or("quantity", body.quantity.as_ref(), 1)?;
    let user = match (buyer, body.user_id) {
        (Buyer::Verified(buyer), Some(named)) if named != buyer.as_str() => {
            return Err(ApiError::WrongBuyer);
        }
        (Buyer::Verified(buyer), _) => buyer,
        (Buyer::Unverified, Some(named)) => UserId::parse(&named)?,
        (Buyer::Unverified, None) => {
            return Err(ApiError::MalformedBody("missing field `user_id`".into()));
        }
    };
    let order = OrderRequest {
        sku,
        user,
        quantity: Quantity::new(quantity)?,
        idempotency_key,
    };
    let answer = sales.buy(order, client).await;
    let mut response = match answer.result {
        Ok(Purchase::Created(order)) => {
            (StatusCode::CREATED, Json(OrderView::from(order))).into_response()
        }
        Ok(Purchase::Replayed(order)) => Json(OrderView::from(order)).into_response(),
        Err(err) => ApiError::from(err).into_response(),
    };
    if let Some(decision) = answer.rate {
        add_rate_headers(response.headers_mut(), &decision);
    }
    Ok(response)
}

/// The orders recorded for a sale, oldest first, a page at a time: all, or
/// one user's.
///
/// When the gateway checks buyer tokens, this needs a bearer token: the
/// admin token lists every order, a buyer's JWT only that buyer's.
#[utoipa::path(
    get,
    path = "/seckill/{sku}/orders",
    tag = "seckill",
    security((), ("buyer" = []), ("admin" = [])),
    params(("sku" = NameText, Path, description = "The product"), OrdersParams),
    responses(
        (status = 200, description = "A page of orders", body = OrderList),
        OrdersProblems,
    )
)]
pub async fn orders(
    State(sales): State<Sales>,
    reader: OrdersReader,
    SkuPath(sku): SkuPath,
    uri: Uri,
) -> Result<Json<OrderList>, ApiError> {
    let Query(query) = Query::<OrdersParams>::try_from_uri(&uri)
        .map_err(|_| ApiError::invalid_field("query", "takes each parameter at most once"))?;
    let named = query.user_id.as_deref().map(UserId::parse).transpose()?;
    let user = match (reader, named) {
        (OrdersReader::Buyer(buyer), Some(named)) if named != buyer => {
            return Err(ApiError::WrongBuyer);
        }
        (OrdersReader::Buyer(buyer), _) => Some(buyer),
        (OrdersReader::Anyone | OrdersReader::Admin, named) => named,
    };
    let limit = match query.limit.as_deref() {
        None => PageLimit::default(),
        Some(text) => PageLimit::new(text.parse().unwrap_or(0))?,
    };
    let cursor = query
        .cursor
        .as_deref()
        .map(|text| Cursor::parse(text, user.is_some()))
        .transpose()?;
    let page = sales
        .orders(
            &sku,
            OrdersQuery {
                user,
                cursor,
                limit,
            },
        )
        .await?;
    Ok(Json(OrderList {
        sku: sku.to_string(),
        orders: page.orders.into_iter().map(OrderRecord::from).collect(),
        next_cursor: page.next,
        complete: page.stored_unread.is_none(),
        stored: page.stored_unread,
    }))
}

impl From<OrderEntry> for OrderRecord {
    fn from(entry: OrderEntry) -> Self {
        Self {
            order_id: entry.order_id,
            user_id: entry.user_id,
            quantity: entry.quantity,
        }
    }
}

fn add_rate_headers(headers: &mut HeaderMap, decision: &RateDecision) {
    for (name, value) in [
        (&RATE_LIMIT_POLICY, decision.policy.header()),
        (&RATE_LIMIT, decision.header()),
    ] {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(name.clone(), value);
        }
    }
}
