//! `entrypoint-tester`: prints every argument the process got, its own path included, as Go prints a
//! `[]string` (`[/agnhost entrypoint-tester a b]`). Tests that override the image's command and args
//! compare against this line, so it is the whole `argv`, not only the subcommand's.

pub fn line(argv: &[String]) -> String {
    crate::gofmt::slice(argv)
}

pub fn run() -> i32 {
    let argv: Vec<String> = std::env::args().collect();
    println!("{}", line(&argv));
    0
}

#[cfg(test)]
mod tests {
    #[test]
    fn prints_the_whole_argv() {
        let argv = ["/agnhost", "entrypoint-tester", "override", "arguments"].map(String::from);
        assert_eq!(
            super::line(&argv),
            "[/agnhost entrypoint-tester override arguments]"
        );
    }
}
