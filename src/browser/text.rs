//! The waiting-room page's words, in English and Korean, and the choice
//! between them by `Accept-Language`.

/// A language the page speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    Ko,
}

impl Lang {
    /// The best of English and Korean for an `Accept-Language` value
    /// (RFC 9110 §12.5.4): the highest `q` wins, the earlier on a tie, and
    /// English when neither is asked for.
    pub fn negotiate(accept_language: Option<&str>) -> Lang {
        let mut best: Option<(Lang, f32)> = None;
        for item in accept_language.unwrap_or("").split(',') {
            let mut parts = item.split(';');
            let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let primary = tag.split('-').next().unwrap_or("");
            let lang = match primary {
                "ko" => Lang::Ko,
                "en" => Lang::En,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(_, b)| q > b) {
                best = Some((lang, q));
            }
        }
        best.map_or(Lang::En, |(lang, _)| lang)
    }

    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Ko => "ko",
        }
    }

    /// Every string of the page, by key. The page's script gets them all
    /// (it has no words of its own); the server fills `{n}` itself when it
    /// renders.
    pub fn strings(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Lang::En => EN,
            Lang::Ko => KO,
        }
    }

    pub fn get(self, key: &str) -> &'static str {
        self.strings()
            .iter()
            .find(|(k, _)| *k == key)
            .map_or("", |(_, v)| v)
    }
}

const EN: &[(&str, &str)] = &[
    ("title", "Waiting room"),
    ("heading_waiting", "You're in line"),
    ("heading_prequeue", "The queue opens soon"),
    ("heading_paused", "Entry is paused"),
    ("heading_not_open", "The queue is not open yet"),
    ("heading_admitted", "It's your turn"),
    ("heading_login", "Sign in to join the queue"),
    ("heading_busy", "The waiting room is busy"),
    ("heading_cookies", "Cookies are needed to keep your place"),
    ("heading_closed", "The queue is closed"),
    ("heading_checking", "Checking your browser"),
    (
        "checking",
        "Your browser is solving a short puzzle that keeps bots out of the line. It takes a second or two.",
    ),
    ("checking_progress", "Checking… {n}%"),
    (
        "checking_needs_script",
        "This queue asks your browser to solve a short puzzle before it joins, which needs JavaScript. Turn JavaScript on, then reload this page.",
    ),
    (
        "checking_failed",
        "Your browser could not solve the puzzle. Reload this page to try again.",
    ),
    ("heading_joining", "Joining the queue"),
    ("joining", "One moment: your invitation is being checked."),
    (
        "joining_needs_script",
        "Joining this queue from an invitation needs JavaScript. Turn JavaScript on, then reload this page.",
    ),
    ("heading_invite", "This queue is by invitation"),
    (
        "invite_required",
        "Open this page from the link in your invitation to join the queue.",
    ),
    (
        "invite_invalid",
        "This invitation is not valid: it has expired, was used already, or is for someone else.",
    ),
    (
        "invite_note",
        "If you think this is a mistake, contact the site that invited you.",
    ),
    ("save_receipt", "Save proof of my place"),
    ("ahead", "{n} people are ahead of you."),
    ("ahead_one", "1 person is ahead of you."),
    ("next", "You're next."),
    ("wait_hours", "About {n} hours"),
    ("wait_minutes", "About {n} minutes"),
    ("wait_minute", "About a minute"),
    ("wait_soon", "Less than a minute"),
    ("wait_unknown", "Not known while entry is paused"),
    (
        "paused",
        "Entry is paused for a moment. You keep your place.",
    ),
    (
        "opens_in_minutes",
        "Opens in about {n} minutes. Everyone who joins before then gets a place in random order.",
    ),
    (
        "opens_in_seconds",
        "Opens in {n} seconds. Everyone who joins before then gets a place in random order.",
    ),
    (
        "opens_in_second",
        "Opens in 1 second. Everyone who joins before then gets a place in random order.",
    ),
    ("not_open", "The queue opens at {t}. Come back then."),
    (
        "closed",
        "Nobody can join or be let in while the queue is closed, and this page no longer updates. If it opens again, reload this page.",
    ),
    ("admitted", "It's your turn! Taking you in…"),
    ("reconnecting", "Connection lost. Trying again…"),
    (
        "cookies_required",
        "This waiting room keeps your place in a cookie. Allow cookies for this site, then reload this page.",
    ),
    ("progress", "{n}% of the way"),
    ("place_label", "Your place"),
    ("wait_label", "Estimated wait"),
    ("progress_label", "Progress"),
    (
        "note",
        "Keep this page open. It updates by itself, and takes you in when it is your turn.",
    ),
    (
        "login_required",
        "Sign in to the site first, then come back to this page.",
    ),
    (
        "unavailable",
        "The waiting room is busy. This page will try again shortly.",
    ),
];

const KO: &[(&str, &str)] = &[
    ("title", "대기실"),
    ("heading_waiting", "대기 중입니다"),
    ("heading_prequeue", "곧 대기열이 열립니다"),
    ("heading_paused", "입장이 잠시 멈췄습니다"),
    ("heading_not_open", "아직 대기열이 열리지 않았습니다"),
    ("heading_admitted", "입장 차례입니다"),
    ("heading_login", "로그인 후 대기열에 들어올 수 있습니다"),
    ("heading_busy", "대기실이 혼잡합니다"),
    ("heading_cookies", "순서를 유지하려면 쿠키가 필요합니다"),
    ("heading_closed", "대기열이 닫혔습니다"),
    ("heading_checking", "브라우저를 확인하는 중입니다"),
    (
        "checking",
        "봇이 줄에 끼어들지 못하도록 브라우저가 짧은 퍼즐을 푸는 중입니다. 1~2초면 끝납니다.",
    ),
    ("checking_progress", "확인 중… {n}%"),
    (
        "checking_needs_script",
        "이 대기열은 들어오기 전에 브라우저가 짧은 퍼즐을 풀어야 하며, 여기에는 JavaScript가 필요합니다. JavaScript를 켠 뒤 페이지를 새로 고쳐 주세요.",
    ),
    (
        "checking_failed",
        "브라우저가 퍼즐을 풀지 못했습니다. 페이지를 새로 고쳐 다시 시도해 주세요.",
    ),
    ("heading_joining", "대기열에 들어가는 중입니다"),
    ("joining", "잠시만 기다려 주세요. 초대장을 확인하고 있습니다."),
    (
        "joining_needs_script",
        "초대장으로 이 대기열에 들어오려면 JavaScript가 필요합니다. JavaScript를 켠 뒤 페이지를 새로 고쳐 주세요.",
    ),
    ("heading_invite", "초대받은 분만 들어올 수 있는 대기열입니다"),
    (
        "invite_required",
        "초대장에 있는 링크로 이 페이지를 열어야 대기열에 들어올 수 있습니다.",
    ),
    (
        "invite_invalid",
        "유효하지 않은 초대장입니다. 기한이 지났거나, 이미 사용되었거나, 다른 분의 초대장입니다.",
    ),
    (
        "invite_note",
        "잘못된 안내라고 생각되면 초대한 사이트에 문의해 주세요.",
    ),
    ("save_receipt", "내 순서 증명 저장하기"),
    ("ahead", "앞에 {n}명이 있습니다."),
    ("ahead_one", "앞에 1명이 있습니다."),
    ("next", "다음 차례입니다."),
    ("wait_hours", "약 {n}시간"),
    ("wait_minutes", "약 {n}분"),
    ("wait_minute", "약 1분"),
    ("wait_soon", "1분 이내"),
    ("wait_unknown", "입장이 멈춘 동안은 알 수 없습니다"),
    (
        "paused",
        "입장이 잠시 멈췄습니다. 순서는 그대로 유지됩니다.",
    ),
    (
        "opens_in_minutes",
        "약 {n}분 후에 열립니다. 그 전에 들어온 분들은 무작위 순서로 배정됩니다.",
    ),
    (
        "opens_in_seconds",
        "{n}초 후에 열립니다. 그 전에 들어온 분들은 무작위 순서로 배정됩니다.",
    ),
    (
        "opens_in_second",
        "1초 후에 열립니다. 그 전에 들어온 분들은 무작위 순서로 배정됩니다.",
    ),
    ("not_open", "대기열은 {t}에 열립니다. 그때 다시 와 주세요."),
    (
        "closed",
        "대기열이 닫혀 있는 동안에는 들어오거나 입장할 수 없으며, 이 페이지는 더 이상 갱신되지 않습니다. 다시 열리면 페이지를 새로 고쳐 주세요.",
    ),
    ("admitted", "차례가 되었습니다! 입장합니다…"),
    ("reconnecting", "연결이 끊겼습니다. 다시 시도하는 중…"),
    (
        "cookies_required",
        "이 대기실은 쿠키로 순서를 유지합니다. 이 사이트의 쿠키를 허용한 뒤 페이지를 새로 고쳐 주세요.",
    ),
    ("progress", "{n}% 진행"),
    ("place_label", "내 순서"),
    ("wait_label", "예상 대기 시간"),
    ("progress_label", "진행률"),
    (
        "note",
        "이 페이지를 열어 두세요. 자동으로 갱신되며, 차례가 되면 바로 입장합니다.",
    ),
    (
        "login_required",
        "먼저 사이트에 로그인한 뒤 이 페이지로 돌아와 주세요.",
    ),
    (
        "unavailable",
        "대기실이 혼잡합니다. 잠시 후 자동으로 다시 시도합니다.",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_language_follows_accept_language() {
        for (header, want) in [
            (None, Lang::En),
            (Some(""), Lang::En),
            (Some("ko-KR,ko;q=0.9,en-US;q=0.8"), Lang::Ko),
            (Some("en-US,en;q=0.9,ko;q=0.8"), Lang::En),
            (Some("fr, ko;q=0.5"), Lang::Ko),
            (Some("fr, de"), Lang::En),
            (Some("en;q=0.2, ko;q=0.7"), Lang::Ko),
            (Some("ko;q=0, en;q=0.1"), Lang::En),
            (Some("KO"), Lang::Ko),
        ] {
            assert_eq!(Lang::negotiate(header), want, "{header:?}");
        }
    }

    #[test]
    fn both_languages_have_every_string() {
        let keys = |l: Lang| l.strings().iter().map(|(k, _)| *k).collect::<Vec<_>>();
        assert_eq!(keys(Lang::En), keys(Lang::Ko));
        for (k, v) in EN.iter().chain(KO) {
            assert!(!v.is_empty(), "{k}");
        }
    }
}
