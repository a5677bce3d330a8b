//! `GET /waiting-room/<queue>?return=<path>`: the waiting-room page.
//!
//! Opening the page is joining the queue: a visitor without the queue
//! cookie is registered (as a new, unguessable user, or as the signed-in
//! one with identity binding) and gets the cookie. Every later load is a
//! rank poll (the heartbeat), so the page works with no JavaScript at all:
//! it shows the place and reloads itself. Once the visitor is admitted, the
//! load trades the credential for a token, sets it as a cookie and answers
//! `303` to `return`. With JavaScript, the page's script polls `rank` and
//! makes the exchange itself, at the interval the server advises. While an
//! operator has the queue closed, the page shows the operator's message and
//! a line of its own, and neither polls nor reloads.

use std::sync::Arc;
use std::sync::LazyLock;

use serde::Serialize;

use super::{register, QueueApi};
use crate::browser::assets::{self, Asset};
use crate::browser::cookie::QueueCookie;
use crate::browser::redirect;
use crate::browser::template::Template;
use crate::browser::text::Lang;
use crate::browser::Caller;
use crate::edge::jwt::Issued;
use crate::error::ApiError;
use crate::queues::Queue;
use crate::reply::Reply;
use crate::store::{Place, Position, Registration};
use crate::user::UserId;

/// The built-in page, parsed once.
static BUILT_IN: LazyLock<Template> =
    LazyLock::new(|| Template::parse(assets::PAGE).expect("the built-in page is a valid template"));

/// The bounds of the no-JavaScript refresh, in seconds.
const REFRESH_MIN_S: u64 = 5;
const REFRESH_MAX_S: u64 = 20;

/// The no-JavaScript refresh, in whole seconds, for a poll advice: the
/// advice within 5 to 20 s (a reload a second is more than a page needs),
/// but never later than the poll advice plus the heartbeat timeout less a
/// second for the reload itself, the time the place is promised for.
fn refresh_s(poll_ms: u64, timeout: std::time::Duration) -> u64 {
    let promised = (poll_ms + timeout.as_millis() as u64) / 1000;
    (poll_ms / 1000)
        .clamp(REFRESH_MIN_S, REFRESH_MAX_S)
        .min(promised.saturating_sub(1))
        .max(1)
}

/// What the page shows.
#[derive(Debug, Clone, PartialEq)]
enum View {
    Waiting {
        place: Place,
        start_rank: u64,
    },
    Prequeue {
        opens_in_ms: u64,
        poll_after_ms: u64,
    },
    NotOpen {
        opens_at_ms: u64,
    },
    /// Redis did not answer: the page says so and tries again.
    Unavailable,
    /// Identity binding is on and the visitor is not signed in.
    LoginRequired,
    /// An operator closed the queue: their message; the page stops.
    Closed {
        message: Arc<str>,
    },
    /// Joining is the page's script's: where the queue asks a proof of
    /// work (`prove`), which only a script can make, and where the page
    /// came with an invite, which a load must not spend (a link scanner
    /// or a chat preview loads the page too). The script registers with
    /// both through the API; without JavaScript the page says it needs it.
    Join {
        invite: Option<String>,
        prove: bool,
    },
    /// An invite-only queue, and the page has no invite, or one that is
    /// not good (`invalid`): the page says so and stops.
    Invite {
        invalid: bool,
    },
}

/// What a visit comes to.
enum Visit {
    /// Show the page; set the queue cookie when the visit registered.
    Show(View, Option<String>),
    /// Admitted: the token, and where to go.
    Admitted(Issued),
}

/// A file of the page's.
pub fn asset(asset: &Asset) -> Reply {
    Reply::file(asset.content_type, asset.body, assets::CACHE)
        .header("X-Content-Type-Options", "nosniff")
}

/// Where an admitted visitor may be sent, from the configured routes.
pub struct Returns<'a> {
    /// Whether a path is under a configured route (where `return` may
    /// lead).
    pub is_route: &'a (dyn Fn(&str) -> bool + Sync),
    /// Where a visitor goes without a `return` to follow (the page opened
    /// from a bookmark, say): the prefix of the queue's first waiting-room
    /// route, else `/`.
    pub home: &'a (dyn Fn(&str) -> String + Sync),
}

impl QueueApi {
    /// Answers a load of the waiting-room page of `queue`. `query` is the
    /// request's query string; `limited`, the client's register limit
    /// (a load over it neither joins nor polls, and shows the page that
    /// retries, with 429).
    pub async fn page(
        &self,
        queue: &str,
        query: Option<&str>,
        caller: &Caller,
        returns: &Returns<'_>,
        limited: Result<(), ApiError>,
    ) -> Reply {
        let lang = Lang::negotiate(caller.accept_language.as_deref());
        let wanted = query.and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "return")
                .map(|(_, v)| v.into_owned())
        });
        let back = redirect::safe_return(wanted.as_deref(), returns.is_route)
            .unwrap_or_else(|| (returns.home)(queue));
        let queue = match self.page_queue(queue, caller) {
            Ok(queue) => queue,
            Err(reply) => return reply,
        };
        let invite = query.and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "invite")
                .map(|(_, v)| v.into_owned())
        });
        let (user, visit) = match limited {
            Ok(()) => self.visit(&queue, caller, invite).await,
            Err(limited) => (None, Err(limited)),
        };
        let reply = self.show(&queue, lang, &back, visit);
        // The access log names whom the load was for, as the API's do.
        match &user {
            Some(user) => reply.about(&queue.name, user.as_str()),
            None => reply.about_queue(&queue.name),
        }
    }

    /// Answers a `HEAD` of the waiting-room page of `queue`: the status and
    /// headers a load of it would get, as far as they are known without
    /// one. A `HEAD` changes nothing, so it neither registers nor polls:
    /// no `Set-Cookie`, no Redis call, and no `Content-Length`, which only
    /// the load learns (the place is in the page; RFC 9110 §9.3.2 lets a
    /// `HEAD` leave out what is known only once the content is made).
    pub fn page_head(&self, queue: &str, caller: &Caller) -> Reply {
        let lang = Lang::negotiate(caller.accept_language.as_deref());
        let queue = match self.page_queue(queue, caller) {
            Ok(queue) => queue,
            Err(reply) => return reply,
        };
        let status = match self.login(caller) {
            // A login that ran out keeps the place its queue cookie holds.
            Ok(Some(signed))
                if signed.expired && self.kept_cookie(&queue, caller, &signed).is_none() =>
            {
                401
            }
            Ok(_) => 200,
            Err(ApiError::LoginRequired | ApiError::InvalidLogin) => 401,
            Err(error) => return Reply::from(error).about_queue(&queue.name),
        };
        page_headers(Reply::html(status, String::new()).without_length(), lang)
            .about_queue(&queue.name)
    }

    /// The queue whose page a request asks for, if the request may ask for
    /// it: the page joins the queue, so only a visitor's own page load may,
    /// not an image or a frame another site's page puts it in (a `HEAD`
    /// is held to the same rule, to answer as its `GET` would).
    fn page_queue(&self, queue: &str, caller: &Caller) -> Result<Arc<Queue>, Reply> {
        let queue = self.queue(Some(queue))?;
        if caller.is_speculative() {
            return Err(Reply::from(ApiError::Prefetch).about_queue(&queue.name));
        }
        if !caller.is_navigation() {
            return Err(Reply::from(ApiError::CrossSite).about_queue(&queue.name));
        }
        Ok(queue)
    }

    /// The reply for what a visit came to.
    fn show(&self, queue: &Queue, lang: Lang, back: &str, visit: Result<Visit, ApiError>) -> Reply {
        let visit = match visit {
            Ok(visit) => visit,
            Err(ApiError::RedisUnavailable) => Visit::Show(View::Unavailable, None),
            // The page that says it will retry, and does, told when.
            Err(ApiError::RateLimited { retry_after_s }) => {
                let mut reply = render(queue, lang, &View::Unavailable, back);
                reply.status = 429;
                reply.headers.retain(|(name, _)| *name != "Retry-After");
                return reply.header("Retry-After", retry_after_s.to_string());
            }
            Err(ApiError::LoginRequired | ApiError::InvalidLogin) => {
                Visit::Show(View::LoginRequired, None)
            }
            Err(ApiError::InviteRequired) => Visit::Show(View::Invite { invalid: false }, None),
            Err(ApiError::InviteInvalid) => Visit::Show(View::Invite { invalid: true }, None),
            Err(error) => return Reply::from(error),
        };
        match visit {
            Visit::Admitted(issued) => Reply::see_other(back.to_string())
                .header("Set-Cookie", self.token_cookie(&queue.name, &issued)),
            Visit::Show(view, cookie) => {
                let reply = render(queue, lang, &view, back);
                match cookie {
                    Some(cookie) => reply.header("Set-Cookie", cookie),
                    None => reply,
                }
            }
        }
    }

    /// Polls for a visitor with the queue cookie, or registers one: whom
    /// the visit was for (once the login and the cookie are read), and
    /// what it came to.
    async fn visit(
        &self,
        queue: &Arc<Queue>,
        caller: &Caller,
        invite: Option<String>,
    ) -> (Option<UserId>, Result<Visit, ApiError>) {
        let signed_in = match self.login(caller) {
            Ok(signed_in) => signed_in,
            Err(error) => return (None, Err(error)),
        };
        // A login that ran out while its visitor waited: the queue cookie
        // keeps the place (and is let in once admitted), but joining again
        // needs a fresh login.
        if let Some(signed) = signed_in.as_ref().filter(|s| s.expired) {
            let user = signed.user.clone();
            let visit = match self.kept_cookie(queue, caller, signed) {
                Some(cookie) => self
                    .poll(queue, &cookie)
                    .await
                    .and_then(|visit| visit.ok_or(ApiError::InvalidLogin)),
                None => Err(ApiError::InvalidLogin),
            };
            return (Some(user), visit);
        }
        let signed_in = signed_in.map(|s| s.user);
        // A cookie of ours, for the signed-in user when there is one.
        let cookie = self.visitor_cookie(queue, caller, signed_in.as_ref());
        // The cookie's user is the signed-in one, when there is one.
        let user = match (signed_in, &cookie) {
            (Some(user), _) => user,
            (None, Some(c)) => c.user.clone(),
            (None, None) => register::mint(),
        };
        let visit = self.poll_or_join(queue, cookie, &user, invite).await;
        (Some(user), visit)
    }

    /// A visit of `user`: a poll with the cookie, or a join without one
    /// (or when the cookie's place is gone).
    async fn poll_or_join(
        &self,
        queue: &Arc<Queue>,
        cookie: Option<QueueCookie>,
        user: &UserId,
        invite: Option<String>,
    ) -> Result<Visit, ApiError> {
        if let Some(c) = &cookie {
            if let Some(visit) = self.poll(queue, c).await? {
                return Ok(visit);
            }
        }
        // An invite-only queue: the invite is checked (not spent) first.
        let invited = self.invite(queue, user.as_str(), invite.as_deref())?;
        let prove = queue.config.challenge.is_some();
        if prove || invited.is_some() {
            return Ok(Visit::Show(View::Join { invite, prove }, None));
        }
        self.join(queue, user).await
    }

    /// A visit with the queue cookie `c`: what its place came to, or
    /// `None` when it has none (the heartbeat ran out, or the user is
    /// active under an earlier registration than this cookie's).
    async fn poll(&self, queue: &Arc<Queue>, c: &QueueCookie) -> Result<Option<Visit>, ApiError> {
        let position = self
            .rank_or_reseat(queue, c.user.as_str(), Some(&c.credential))
            .await
            .map_err(|e| self.unavailable(super::Endpoint::Rank, e))?;
        Ok(match position {
            Position::Waiting(place) => Some(Visit::Show(
                View::Waiting {
                    place,
                    start_rank: c.start_rank.max(place.rank),
                },
                None,
            )),
            Position::Prequeued {
                opens_in_ms,
                poll_after_ms,
            } => Some(Visit::Show(
                View::Prequeue {
                    opens_in_ms,
                    poll_after_ms,
                },
                None,
            )),
            Position::Active { .. } => match self.exchange(queue, &c.user, &c.credential).await {
                Ok(issued) => Some(Visit::Admitted(issued)),
                // Active under an earlier registration than this cookie's.
                Err(ApiError::NotActive) => None,
                Err(e) => return Err(e),
            },
            // Gone: the heartbeat ran out.
            Position::NotQueued => None,
            Position::Closed(closed) => Some(Visit::Show(
                View::Closed {
                    message: closed.message,
                },
                None,
            )),
        })
    }

    /// Registers `user` for the page (a queue that asks neither a proof
    /// nor an invite).
    async fn join(&self, queue: &Arc<Queue>, user: &UserId) -> Result<Visit, ApiError> {
        // The visitor's cookie names the user (or a new one is made).
        let by = register::By {
            proven: false,
            owned: true,
        };
        let (registration, credential, _) = self.register_user(queue, user, by, &[]).await?;
        let rank = register::start_rank(&registration);
        let cookie = |credential: &str| Some(self.set_queue_cookie(queue, credential, rank, user));
        Ok(match registration {
            Registration::New { place, .. } => Visit::Show(
                View::Waiting {
                    place,
                    start_rank: rank,
                },
                credential.as_deref().and_then(cookie),
            ),
            // Only the signed-in user can get here without the cookie
            // (another device, or a lost cookie): the login proves who it
            // is, so this registration's credential is made again.
            Registration::AlreadyWaiting {
                place,
                arrival,
                number,
            } => {
                let again = self.logins().map(|_| {
                    self.credentials()
                        .issue(&queue.name, user.as_str(), arrival, number)
                });
                Visit::Show(
                    View::Waiting {
                        place,
                        start_rank: rank,
                    },
                    again.as_deref().and_then(cookie),
                )
            }
            Registration::Prequeued {
                opens_in_ms,
                poll_after_ms,
                ..
            } => Visit::Show(
                View::Prequeue {
                    opens_in_ms,
                    poll_after_ms,
                },
                credential.as_deref().and_then(cookie),
            ),
            Registration::NotOpen { opens_at_ms } => {
                Visit::Show(View::NotOpen { opens_at_ms }, None)
            }
            Registration::Closed(closed) => Visit::Show(
                View::Closed {
                    message: closed.message,
                },
                None,
            ),
            // (The page joins only queues that ask neither: refused by
            // `register_user` in any case.)
            Registration::ProofSpent => return Err(ApiError::ProofInvalid),
            Registration::InviteSpent => return Err(ApiError::InviteInvalid),
            // Active without a cookie: the signed-in user on another device
            // is let in with the admitted registration's credential; an API
            // client's user opening the page cannot be (its token needs the
            // credential only it holds), and is shown the head of the queue.
            Registration::Active { arrival, .. } => {
                if self.logins().is_some() && arrival > 0 {
                    let credential =
                        self.credentials()
                            .issue(&queue.name, user.as_str(), arrival, None);
                    match self.exchange(queue, user, &credential).await {
                        Ok(issued) => return Ok(Visit::Admitted(issued)),
                        // The active state ended just now: the next load
                        // joins again.
                        Err(ApiError::NotActive) => {}
                        Err(e) => return Err(e),
                    }
                }
                Visit::Show(
                    View::Waiting {
                        place: Place {
                            rank: 0,
                            wait_ms: Some(0),
                            poll_after_ms: queue.config.heartbeat.poll_min.as_millis() as u64,
                        },
                        start_rank: 0,
                    },
                    None,
                )
            }
        })
    }
}

/// The page's machine status and the advised poll, for a view.
fn status(queue: &Queue, view: &View) -> (&'static str, u64) {
    let longest = queue.config.heartbeat.poll_max.as_millis() as u64;
    match view {
        View::Waiting { place, .. } if place.wait_ms.is_none() => ("PAUSED", place.poll_after_ms),
        View::Waiting { place, .. } => ("WAITING", place.poll_after_ms),
        View::Prequeue { poll_after_ms, .. } => ("PREQUEUE", *poll_after_ms),
        View::NotOpen { .. } => ("NOT_OPEN", longest),
        View::Unavailable => ("UNAVAILABLE", 5_000),
        View::LoginRequired => ("LOGIN_REQUIRED", longest),
        // (Never polled: the page neither polls nor refreshes.)
        View::Closed { .. } => ("CLOSED", longest),
        // (Nor here: the page's script registers, then polls.)
        View::Join { prove: true, .. } => ("CHALLENGE", longest),
        View::Join { prove: false, .. } => ("JOIN", longest),
        // (Nor here: nothing the page can do.)
        View::Invite { .. } => ("INVITE_REQUIRED", longest),
    }
}

/// The words and numbers of a view.
struct Words {
    heading: String,
    message: String,
    place: String,
    wait: String,
    progress: u64,
    note: &'static str,
}

impl Words {
    /// A view that shows no place, wait or progress.
    fn without_place(heading: &str, message: String, note: &'static str) -> Words {
        Words {
            heading: heading.to_string(),
            message,
            place: PLACELESS.to_string(),
            wait: PLACELESS.to_string(),
            progress: 0,
            note,
        }
    }
}

/// What stands for a place or a wait a view does not show.
const PLACELESS: &str = "–";

fn fill(template: &str, n: u64) -> String {
    template.replace("{n}", &grouped(n))
}

/// A number with its thousands grouped (1,241), as both languages write it.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

fn words(lang: Lang, view: &View) -> Words {
    match view {
        View::Waiting { place, start_rank } => {
            let rank = place.rank;
            let message = match (place.wait_ms, rank) {
                (None, _) => lang.get("paused").to_string(),
                (_, 0) => lang.get("next").to_string(),
                (_, 1) => lang.get("ahead_one").to_string(),
                (_, n) => fill(lang.get("ahead"), n),
            };
            let wait = match place.wait_ms {
                None => lang.get("wait_unknown").to_string(),
                Some(ms) if ms < 60_000 => lang.get("wait_soon").to_string(),
                Some(ms) if ms < 90_000 => lang.get("wait_minute").to_string(),
                Some(ms) if ms < 120 * 60_000 => {
                    fill(lang.get("wait_minutes"), (ms + 30_000) / 60_000)
                }
                Some(ms) => fill(lang.get("wait_hours"), (ms + 1_800_000) / 3_600_000),
            };
            // The start comes from the visitor's cookie: any u64 is possible.
            // 100% is for once admitted: the next in line is not in yet.
            let progress = match *start_rank {
                0 => 99,
                start => (100 * u128::from(start.saturating_sub(rank)) / u128::from(start)) as u64,
            }
            .min(99);
            Words {
                heading: lang
                    .get(if place.wait_ms.is_none() {
                        "heading_paused"
                    } else {
                        "heading_waiting"
                    })
                    .to_string(),
                message,
                place: grouped(rank + 1),
                wait,
                progress,
                note: lang.get("note"),
            }
        }
        View::Prequeue { opens_in_ms, .. } => {
            let seconds = opens_in_ms.div_ceil(1000);
            let message = if seconds == 1 {
                lang.get("opens_in_second").to_string()
            } else if seconds < 120 {
                fill(lang.get("opens_in_seconds"), seconds)
            } else {
                fill(lang.get("opens_in_minutes"), seconds.div_ceil(60))
            };
            Words::without_place(lang.get("heading_prequeue"), message, lang.get("note"))
        }
        // In UTC here; the page's script says it in the visitor's own time.
        View::NotOpen { opens_at_ms } => Words::without_place(
            lang.get("heading_not_open"),
            lang.get("not_open")
                .replace("{t}", &crate::time::readable_utc(*opens_at_ms)),
            lang.get("note"),
        ),
        View::Unavailable => Words::without_place(
            lang.get("heading_busy"),
            lang.get("unavailable").to_string(),
            lang.get("note"),
        ),
        View::LoginRequired => Words::without_place(
            lang.get("heading_login"),
            lang.get("login_required").to_string(),
            lang.get("note"),
        ),
        // The operator's words, and the page's own line in the visitor's
        // language in place of "keep this page open".
        View::Closed { message } => Words::without_place(
            lang.get("heading_closed"),
            message.to_string(),
            lang.get("closed"),
        ),
        // The note is for a visitor without JavaScript; the script puts
        // the usual one in its place as it starts.
        View::Join { prove: true, .. } => Words::without_place(
            lang.get("heading_checking"),
            lang.get("checking").to_string(),
            lang.get("checking_needs_script"),
        ),
        View::Join { prove: false, .. } => Words::without_place(
            lang.get("heading_joining"),
            lang.get("joining").to_string(),
            lang.get("joining_needs_script"),
        ),
        View::Invite { invalid } => Words::without_place(
            lang.get("heading_invite"),
            lang.get(if *invalid {
                "invite_invalid"
            } else {
                "invite_required"
            })
            .to_string(),
            lang.get("invite_note"),
        ),
    }
}

/// What the page's script starts from.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ScriptConfig<'a> {
    queue: &'a str,
    #[serde(rename = "return")]
    back: &'a str,
    status: &'a str,
    rank: Option<u64>,
    start_rank: Option<u64>,
    poll_after_ms: u64,
    opens_in_seconds: Option<u64>,
    opens_at_ms: Option<u64>,
    lang: &'static str,
    /// Where the script that solves a challenge is (a challenge view only).
    #[serde(skip_serializing_if = "Option::is_none")]
    proof_worker: Option<String>,
    /// The page's invite, which the script's register carries (a join
    /// view of an invite-only queue only).
    #[serde(skip_serializing_if = "Option::is_none")]
    invite: Option<&'a str>,
    strings: serde_json::Map<String, serde_json::Value>,
}

/// The page for `view`.
fn render(queue: &Queue, lang: Lang, view: &View, back: &str) -> Reply {
    let (status, poll_ms) = status(queue, view);
    let words = words(lang, view);
    let refresh = refresh_s(poll_ms, queue.config.heartbeat.timeout);
    let (rank, start_rank) = match view {
        View::Waiting { place, start_rank } => (Some(place.rank), Some(*start_rank)),
        _ => (None, None),
    };
    let config = ScriptConfig {
        queue: &queue.name,
        back,
        status,
        rank,
        start_rank,
        poll_after_ms: poll_ms,
        opens_in_seconds: match view {
            View::Prequeue { opens_in_ms, .. } => Some(opens_in_ms.div_ceil(1000)),
            _ => None,
        },
        opens_at_ms: match view {
            View::NotOpen { opens_at_ms } => Some(*opens_at_ms),
            _ => None,
        },
        lang: lang.code(),
        proof_worker: matches!(view, View::Join { prove: true, .. })
            .then(|| format!("{}proof-worker.js", redirect::ASSETS_PREFIX)),
        invite: match view {
            View::Join { invite, .. } => invite.as_deref(),
            _ => None,
        },
        strings: lang
            .strings()
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect(),
    };
    // In a <script> element, `<` could end it: JSON may write it escaped.
    let json = serde_json::to_string(&config)
        .unwrap_or_else(|_| "{}".into())
        .replace('<', "\\u003c");
    // Pages that need no script (the visitor cannot be admitted from here)
    // still refresh, and so does everything without JavaScript; but for a
    // closed queue, which nothing on the page can change, and a challenge,
    // which only a script can answer.
    let refresh_tag = match view {
        View::Closed { .. } | View::Join { .. } | View::Invite { .. } => String::new(),
        _ => format!("<noscript><meta http-equiv=\"refresh\" content=\"{refresh}\"></noscript>\n"),
    };
    let head = format!(
        "{refresh_tag}<link rel=\"stylesheet\" href=\"{assets}waitgate.css\">\n\
         <script src=\"{assets}waitgate-client.js\" defer></script>\n\
         <script src=\"{assets}page.js\" defer></script>\n\
         <script type=\"application/json\" id=\"waitgate-config\">{json}</script>",
        assets = redirect::ASSETS_PREFIX,
    );
    let title = queue
        .config
        .page
        .title
        .as_deref()
        .unwrap_or_else(|| lang.get("title"));
    let progress = words.progress.to_string();
    let template = queue.config.page.template.as_deref().unwrap_or(&BUILT_IN);
    let page = template.render(|name| match name {
        "head" => &head,
        "lang" => lang.code(),
        "title" => title,
        "heading" => &words.heading,
        "message" => &words.message,
        "place-label" => lang.get("place_label"),
        "place" => &words.place,
        "wait-label" => lang.get("wait_label"),
        "wait" => &words.wait,
        "progress-label" => lang.get("progress_label"),
        "progress" => &progress,
        "note" => words.note,
        "status" => status,
        "queue" => &queue.name,
        _ => "",
    });
    let code = match view {
        View::Unavailable => 503,
        View::LoginRequired => 401,
        _ => 200,
    };
    let reply = page_headers(Reply::html(code, page), lang);
    if code == 503 {
        reply.header("Retry-After", refresh.to_string())
    } else {
        reply
    }
}

/// The headers every answer about the page carries, whatever it shows.
fn page_headers(reply: Reply, lang: Lang) -> Reply {
    reply
        .header("Content-Security-Policy", assets::CONTENT_SECURITY_POLICY)
        .header("X-Content-Type-Options", "nosniff")
        .header("Referrer-Policy", "same-origin")
        .header("Content-Language", lang.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn page(view: View, lang: Lang) -> String {
        let queue = super::super::tests::queue();
        let reply = render(&queue, lang, &view, "/tickets/a?b=1");
        String::from_utf8(reply.body.to_vec()).unwrap()
    }

    #[test]
    fn the_refresh_comes_within_the_time_the_place_is_promised_for() {
        let s = Duration::from_secs;
        // The defaults: 5 s near the head, up to 20 s far back.
        assert_eq!(refresh_s(1_000, s(30)), 5);
        assert_eq!(refresh_s(12_400, s(30)), 12);
        assert_eq!(refresh_s(30_000, s(30)), 20);
        // A short timeout: sooner, so that the reload is not too late (a
        // meta refresh counts whole seconds, so 1 s is the soonest).
        assert_eq!(refresh_s(1_000, s(2)), 2);
        assert_eq!(refresh_s(200, Duration::from_millis(600)), 1);
        for poll in [100, 1_000, 4_000, 30_000] {
            for timeout in [2_000, 3_000, 10_000, 30_000] {
                let r = refresh_s(poll, Duration::from_millis(timeout)) * 1000;
                assert!(r + 1000 <= poll + timeout, "{poll} + {timeout}: {r}");
            }
        }
    }

    #[test]
    fn the_page_shows_the_place_in_the_visitors_language() {
        let view = View::Waiting {
            place: Place {
                rank: 41,
                wait_ms: Some(200_000),
                poll_after_ms: 10_000,
            },
            start_rank: 100,
        };
        let en = page(view.clone(), Lang::En);
        assert!(en.contains("<html lang=\"en\">"));
        assert!(en.contains("41 people are ahead of you."), "{en}");
        assert!(en.contains(">42<"), "place 42");
        assert!(en.contains("About 3 minutes"));
        assert!(en.contains("value=\"59\""), "progress 59%");
        assert!(en.contains("<meta http-equiv=\"refresh\" content=\"10\">"));
        assert!(en.contains("\"return\":\"/tickets/a?b=1\""));
        let ko = page(view, Lang::Ko);
        assert!(ko.contains("<html lang=\"ko\">"));
        assert!(ko.contains("앞에 41명이 있습니다."), "{ko}");
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (1_241, "1,241"),
            (1_000_000, "1,000,000"),
        ] {
            assert_eq!(grouped(n), text);
        }
    }

    #[test]
    fn paused_and_prequeue_pages_say_why_nobody_moves() {
        let paused = page(
            View::Waiting {
                place: Place {
                    rank: 3,
                    wait_ms: None,
                    poll_after_ms: 30_000,
                },
                start_rank: 3,
            },
            Lang::En,
        );
        assert!(paused.contains("data-status=\"PAUSED\""));
        assert!(paused.contains("Entry is paused for a moment"));
        for (opens_in_ms, says) in [
            (90_000, "Opens in 90 seconds."),
            (700, "Opens in 1 second."),
        ] {
            let pre = page(
                View::Prequeue {
                    opens_in_ms,
                    poll_after_ms: 1_000,
                },
                Lang::En,
            );
            assert!(pre.contains(says), "{pre}");
            assert!(pre.contains("data-status=\"PREQUEUE\""));
        }
    }

    #[test]
    fn a_closed_queue_shows_the_operators_words_and_the_page_stops() {
        let view = View::Closed {
            message: "Sold out <b>today</b>.".into(),
        };
        let en = page(view.clone(), Lang::En);
        assert!(en.contains("data-status=\"CLOSED\""), "{en}");
        assert!(en.contains("\"status\":\"CLOSED\""), "the script's config");
        assert!(en.contains(">Sold out &lt;b&gt;today&lt;/b&gt;.<"), "{en}");
        assert!(en.contains(">The queue is closed<"));
        assert!(
            en.contains("class=\"wg-note\">Nobody can join or be let in"),
            "{en}"
        );
        assert!(!en.contains("http-equiv=\"refresh\""), "no refresh");
        let ko = page(view, Lang::Ko);
        assert!(ko.contains(">대기열이 닫혔습니다<"), "{ko}");
        assert!(ko.contains("이 페이지는 더 이상 갱신되지 않습니다"));
    }

    #[test]
    fn nothing_a_visitor_sends_can_end_the_script_block() {
        let queue = super::super::tests::queue();
        let reply = render(
            &queue,
            Lang::En,
            &View::Unavailable,
            "/x</script><script>alert(1)",
        );
        let body = String::from_utf8(reply.body.to_vec()).unwrap();
        assert!(!body.contains("</script><script>alert"));
        assert_eq!(reply.status, 503);
    }
}
